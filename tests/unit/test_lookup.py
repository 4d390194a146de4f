"""Which reader a batch's lookup uses (``store.lookup``), and the fall-back to Spark.

The readers themselves are held to the reference model on real Delta tables in
``tests/integration/test_store_model.py``; here only the choice, which is pure logic.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pytest

from ttl.config import StoreConfig
from ttl.store import lookup
from ttl.store.fold import stored_arrow_schema


@pytest.mark.parametrize(("path", "local"), [
    ("/data/store", "/data/store"), ("file:/data/store", "/data/store"),
    ("file:///data/store", "/data/store"), ("relative/store", "relative/store"),
    ("s3a://bucket/store", None), ("abfss://c@a.dfs.core.windows.net/s", None),
    ("hdfs://nn/store", None)])
def test_local_paths_are_told_from_remote_ones(path, local):
    assert lookup.local_path(path) == local


@pytest.mark.parametrize(("how", "path", "rust"), [
    ("auto", "/data/store", True), ("auto", "s3a://bucket/store", False),
    ("delta-rs", "s3a://bucket/store", True), ("spark", "/data/store", False)])
def test_the_reader_follows_the_setting(how, path, rust):
    assert lookup.Lookup(how).uses_delta_rs(path) is rust


def test_the_setting_is_validated_by_name():
    with pytest.raises(ValueError, match="lookup"):
        StoreConfig(name="s", path="/x", lookup="duckdb")


def test_a_table_delta_rs_cannot_read_falls_back_to_spark_for_good(monkeypatch, caplog):
    calls: list[str] = []
    row = pa.table({"key": [b"k"], "ts": [1], "expires_at": [None], "record_ttl": [None]},
                   schema=stored_arrow_schema())

    def rust(path, keys, version):
        calls.append("delta-rs")
        raise OSError("unsupported reader feature: fancyFeature")

    def spark(session, path, keys, version):
        calls.append(f"spark@{version}")
        return row

    monkeypatch.setattr(lookup, "with_delta_rs", rust)
    monkeypatch.setattr(lookup, "with_spark", spark)
    reader = lookup.Lookup("auto")
    keys = pa.array([b"k"], pa.binary())
    with caplog.at_level(logging.WARNING, logger="ttl.store.lookup"):
        assert reader(None, "/data/store", keys, 7) is row
        assert reader(None, "/data/store", keys, 8) is row
    assert calls == ["delta-rs", "spark@7", "spark@8"]
    assert reader.fell_back and reader.reads == {"spark": 2}
    assert "fancyFeature" in caplog.text and "with Spark from now on" in caplog.text


def test_no_keys_reads_nothing(monkeypatch):
    monkeypatch.setattr(lookup, "with_delta_rs", lambda *a: pytest.fail("read"))
    empty = lookup.Lookup()(None, "/data/store", pa.array([], pa.binary()), 3)
    assert empty.num_rows == 0 and empty.schema == stored_arrow_schema()
