"""``ttl.jvm.log_store.add_to``: when a session names the local log store (pure logic)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ttl.jvm import jars, log_store

JAR = Path("/cache/ttl-log-store-x.jar")


def test_a_built_store_is_named_for_file_paths_and_its_jar_joins_spark_jars(monkeypatch):
    monkeypatch.setattr(log_store, "built", lambda versions=None: JAR)
    got = log_store.add_to({"spark.jars": "/a.jar,/b.jar"})
    assert got[log_store.SETTING] == "ttl.delta.FileLogStore"
    assert got[log_store.CHECKPOINT_MANAGER_SETTING] == "ttl.delta.LocalCheckpointFileManager"
    assert got["spark.jars"] == f"/a.jar,/b.jar,{JAR}"
    assert log_store.add_to({})["spark.jars"] == str(JAR)


def test_a_store_named_by_the_profile_is_kept_and_no_jar_leaves_the_settings_alone(
        monkeypatch):
    """The profile's own store and checkpoint manager stay; ttl's jar still joins (its
    writes by position are the driver's, whichever log store lists the table)."""
    mine = {"spark.jars": "/a.jar", log_store.SETTING: "io.delta.storage.HDFSLogStore",
            log_store.CHECKPOINT_MANAGER_SETTING: "my.Manager"}
    monkeypatch.setattr(log_store, "built", lambda versions=None: JAR)
    assert log_store.add_to(mine) == {**mine, "spark.jars": f"/a.jar,{JAR}"}
    monkeypatch.setattr(log_store, "built", lambda versions=None: None)
    assert log_store.add_to({"spark.jars": "/a.jar"}) == {"spark.jars": "/a.jar"}


def test_the_jar_is_named_after_its_source_and_the_pinned_versions():
    pinned = jars.Versions.load()
    other = dataclasses.replace(pinned, delta="9.9.9")
    assert log_store.jar_path(pinned) != log_store.jar_path(other)
    assert log_store.jar_path(pinned).parent == jars.cache_root() / "jars"


def test_a_profile_with_deltas_older_store_setting_keeps_it(monkeypatch):
    """Delta refuses ``spark.delta.logStore.file.impl`` beside ``spark.delta.logStore.class``."""
    monkeypatch.setattr(log_store, "built", lambda versions=None: JAR)
    old = {"spark.jars": "/a.jar", "spark.delta.logStore.class": "x.Y"}
    got = log_store.add_to(old)
    assert "spark.delta.logStore.file.impl" not in got
    assert got["spark.delta.logStore.class"] == "x.Y"
