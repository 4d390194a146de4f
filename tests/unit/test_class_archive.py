"""Which class-data archive a local driver maps (``ttl.jvm.class_archive``): pure logic."""

from __future__ import annotations

import pytest

from ttl import spark as spark_settings
from ttl.jvm import class_archive


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty archive directory (the jars still come from the real cache)."""
    monkeypatch.setattr(class_archive, "archive_dir", lambda: tmp_path)
    return tmp_path


def test_the_archive_name_follows_the_classpath_and_the_jdk(monkeypatch):
    base = {"spark.jars": "/a.jar"}
    assert class_archive.key(base) == class_archive.key(dict(base))
    assert class_archive.key({**base, "spark.driver.extraClassPath": "/x.jar"}) != \
        class_archive.key(base)
    assert class_archive.key({"spark.jars": "/b.jar"}) != class_archive.key(base)
    before = class_archive.key(base)
    monkeypatch.setenv("SPARK_DIST_CLASSPATH", "/hadoop/*")
    assert class_archive.key(base) != before
    monkeypatch.delenv("SPARK_DIST_CLASSPATH")
    monkeypatch.setattr(class_archive, "_java", lambda: None)
    assert class_archive.key(base) is None and class_archive.java_options(base) is None


def test_a_local_driver_maps_the_archive_only_once_it_is_built(cache, monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    settings = spark_settings.session_settings()
    assert "SharedArchiveFile" not in settings.get("spark.driver.extraJavaOptions", "")
    path = class_archive.archive_path(settings)
    assert path.parent == cache
    path.write_bytes(b"built")
    settings = spark_settings.session_settings()
    options = settings["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={path}" in options
    assert "-Dlog4j2.configurationFile=" in options                # the others stay
    assert "SharedArchiveFile" not in settings.get("spark.executor.extraJavaOptions", "")


def test_no_archive_for_a_cluster_driver_or_under_spark_submit(cache, monkeypatch):
    from ttl.config import SparkConfig

    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    class_archive.archive_path(spark_settings.session_settings()).write_bytes(b"built")
    remote = spark_settings.session_settings(SparkConfig(master="spark://host:7077"))
    assert "SharedArchiveFile" not in remote.get("spark.driver.extraJavaOptions", "")
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")                 # the JVM is started already
    jars = {"spark.jars": "/a.jar"}  # what spark-submit passed
    class_archive.archive_path(spark_settings.session_settings(overrides=jars)).write_bytes(
        b"built")
    submitted = spark_settings.session_settings(overrides=jars)
    assert "SharedArchiveFile" not in submitted.get("spark.driver.extraJavaOptions", "")
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT")                      # the same, started here
    assert "SharedArchiveFile" in spark_settings.session_settings(
        overrides=jars)["spark.driver.extraJavaOptions"]
