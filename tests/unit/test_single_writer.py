"""A store on S3 is refused unless Delta's log store there excludes a second driver's commit
(``ttl.single_writer``): the rule, on profiles (pure, no Spark)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ttl import single_writer
from ttl.config import from_dict, tomllib

DYNAMO = "io.delta.storage.S3DynamoDBLogStore"


def profile(path: str, settings: dict[str, str] | None = None, **store):
    return from_dict({"store": {"name": "s", "path": path, "ttl": "1h", **store},
                      "kafka": {"input_topic": "i", "changelog_topic": "c"},
                      "stream": {"checkpoint": "/tmp/cp"},
                      "spark": {"settings": settings or {}}})


@pytest.mark.parametrize("path", ["/data/store", "file:///data/store", "gs://b/store",
                                  "abfss://c@a.dfs.core.windows.net/store", "hdfs://nn/store"])
def test_stores_whose_log_store_excludes_other_drivers_pass(path):
    assert single_writer.problem(profile(path)) is None


@pytest.mark.parametrize("scheme", ["s3a", "s3", "s3n"])
def test_a_store_on_s3_with_deltas_default_log_store_is_refused_naming_the_fix(scheme):
    said = single_writer.problem(profile(f"{scheme}://bucket/store"))
    assert said is not None and said.startswith(f"store.path {scheme}://bucket/store is on S3")
    assert f'"spark.delta.logStore.{scheme}.impl" = "{DYNAMO}"' in said
    assert "store.allow_single_driver_log_store = true" in said
    assert "S3SingleDriverLogStore" in said


def test_the_multi_driver_log_store_or_the_stated_single_driver_pass():
    assert single_writer.problem(profile(
        "s3a://b/store", {"spark.delta.logStore.s3a.impl": DYNAMO})) is None
    assert single_writer.problem(profile(
        "s3a://b/store", {"delta.logStore.s3a.impl": DYNAMO})) is None  # Delta's other prefix
    assert single_writer.problem(profile(
        "s3a://b/store", {"spark.delta.logStore.s3a.impl": single_writer.S3_CONDITIONAL})) is None
    # settings from elsewhere (conf/spark-defaults.conf) count when the caller passes them
    assert single_writer.problem(profile("s3a://b/store"),
                                 {"spark.delta.logStore.s3a.impl": DYNAMO}) is None
    assert single_writer.problem(profile(
        "s3a://b/store", {"spark.delta.logStore.class": DYNAMO})) is None
    assert single_writer.problem(profile(
        "s3a://b/store", allow_single_driver_log_store=True)) is None


def test_a_named_log_store_that_cannot_exclude_them_is_refused_too():
    for chosen in ("io.delta.storage.S3SingleDriverLogStore", "io.delta.storage.HDFSLogStore",
                   "io.delta.storage.AzureLogStore", "io.delta.storage.GCSLogStore",
                   "org.apache.spark.sql.delta.storage.DelegatingLogStore"):
        said = single_writer.problem(profile("s3a://b/store",
                                             {"spark.delta.logStore.class": chosen}))
        assert said is not None and chosen in said
    assert single_writer.problem(profile(  # an ignored prefix is no remedy
        "s3a://b/store", {"spark.databricks.tahoe.logStore.s3a.impl": DYNAMO})) is not None
    # the global class is the one looked at first
    said = single_writer.problem(profile("s3a://b/store", {
        "spark.delta.logStore.class": "io.delta.storage.S3SingleDriverLogStore",
        "spark.delta.logStore.s3a.impl": DYNAMO}))
    assert said is not None
    # the store's DynamoDB setting covers s3a only: a dead-letter table on s3 is named
    said = single_writer.problem(profile("s3a://b/store", {
        "spark.delta.logStore.s3a.impl": DYNAMO}, dead_letter_path="s3://b/dead"))
    assert said is not None and said.startswith("store.dead_letter_path s3://b/dead")


@pytest.mark.parametrize("default_fs", ["s3a://bucket", "hdfs://nn:8020", "dbfs:/"])
def test_a_location_without_scheme_off_the_local_disk_is_refused(default_fs):
    """A path with no scheme is on Hadoop's default file system for Spark (Delta picks its
    log store by that scheme too), and on the local disk for delta-rs: unless the default
    is the local file system the two would not see one table, whatever the log store."""
    conditional = {"spark.delta.logStore.s3a.impl": single_writer.S3_CONDITIONAL}
    said = single_writer.problem(profile("/data/store", {
        single_writer.DEFAULT_FS: default_fs, **conditional}))
    assert said is not None and said.startswith("store.path /data/store has no scheme"), said
    assert default_fs in said and "fs.defaultFS" in said
    # from a running session: its Hadoop configuration's default (core-site.xml included)
    said = single_writer.problem(profile("/data/store", conditional), default_fs=default_fs)
    assert said is not None and "store.path /data/store" in said
    # stating a single driver does not make the two agree on where the table is
    assert single_writer.problem(profile("/data/store", allow_single_driver_log_store=True),
                                 default_fs=default_fs) is not None
    for local in ("file:///", "file:/", None):
        assert single_writer.problem(profile("/data/store"), default_fs=local) is None
    # a whole location is where it says, whatever the default
    assert single_writer.problem(profile("file:///data/store"), default_fs=default_fs) is None
    assert single_writer.problem(profile("s3a://b/store", conditional),
                                 default_fs=default_fs) is None


def test_another_table_a_command_writes_is_held_to_the_same_rule():
    """A restore's ``--target`` is written like the store: on S3 with Delta's default log
    store it is refused, naming what named it."""
    conditional = {"spark.delta.logStore.s3a.impl": single_writer.S3_CONDITIONAL}
    said = single_writer.problem(profile("/data/store"), also=[("--target", "s3a://b/copy")])
    assert said is not None and said.startswith("--target s3a://b/copy is on S3"), said
    assert single_writer.problem(profile("/data/store", conditional),
                                 also=[("--target", "s3a://b/copy")]) is None
    said = single_writer.problem(profile("file:///data/store"), also=[("--target", "copy")],
                                 default_fs="s3a://b")
    assert said is not None and said.startswith("--target copy has no scheme"), said


def test_the_readmes_s3_profile_is_one_the_engine_runs():
    """The README's example profile (on S3) must validate and not be refused."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    block = re.search(r"```toml\n(.*?)```", readme, re.S).group(1)
    conf = from_dict(tomllib.loads(block))
    assert conf.store.path.startswith("s3a://")
    assert single_writer.problem(conf) is None


def test_the_embedded_broker_of_a_store_on_s3_keeps_its_data_in_the_cache(monkeypatch,
                                                                        tmp_path):
    """A store on ``s3a://`` with the embedded broker (conf/s3-local.toml): the broker's data
    goes under ttl's cache by store name, not to a directory named after the URI (which
    made ``s3a:/ttl/kafka`` in the working directory); a local store keeps it beside."""
    from ttl.app import embedded_kafka_dir

    monkeypatch.setenv("TTL_CACHE", str(tmp_path / "cache"))
    assert embedded_kafka_dir(profile("s3a://bucket/store")) == tmp_path / "cache" / "kafka" / "s"
    assert embedded_kafka_dir(profile(str(tmp_path / "data" / "store"))) == \
        tmp_path / "data" / "kafka"
