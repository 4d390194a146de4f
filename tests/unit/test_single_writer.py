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
