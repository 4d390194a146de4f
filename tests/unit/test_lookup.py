"""Which reader a batch's lookup uses (``store.lookup``), and the fall-back to Spark.

The readers themselves are held to the reference model on real Delta tables in
``tests/integration/test_store_model.py``; here only the choice, which is pure logic.
"""

from __future__ import annotations

import logging

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given
from hypothesis import strategies as st

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
    ("auto", "/data/store", True), ("auto", "s3a://bucket/store", True),
    ("auto", "abfss://c@a.dfs.core.windows.net/s", False),
    ("delta-rs", "s3a://bucket/store", True), ("spark", "/data/store", False)])
def test_the_reader_follows_the_setting(how, path, rust):
    assert lookup.Lookup(how).uses_delta_rs(path) is rust


def test_the_setting_is_validated_by_name():
    with pytest.raises(ValueError, match="lookup"):
        StoreConfig(name="s", path="/x", lookup="duckdb")


def _readers(monkeypatch, fail: list[bool]):
    """delta-rs fails while ``fail`` says so; both readers log their calls."""
    calls: list[str] = []
    row = pa.table({"key": [b"k"], "ts": [1], "expires_at": [None], "record_ttl": [None]},
                   schema=stored_arrow_schema())

    def rust(path, keys, version, **_):
        calls.append(f"delta-rs@{version}")
        if fail[0]:
            raise OSError("unsupported reader feature: fancyFeature")
        return row

    def spark(session, path, keys, version):
        calls.append(f"spark@{version}")
        return row

    monkeypatch.setattr(lookup, "with_delta_rs", rust)
    monkeypatch.setattr(lookup, "with_spark", spark)
    return calls, row


KEYS = pa.array([b"k"], pa.binary())


def test_a_failed_delta_rs_read_is_done_by_spark_and_repeated_failures_give_up(
        monkeypatch, caplog):
    fail = [True]
    calls, row = _readers(monkeypatch, fail)
    reader = lookup.Lookup("auto")
    with caplog.at_level(logging.WARNING, logger="ttl.store.lookup"):
        assert reader(None, "/data/store", KEYS, 1) is row  # one failure: this batch only
        fail[0] = False
        assert reader(None, "/data/store", KEYS, 2) is row  # delta-rs again, and it works
        fail[0] = True
        for version in range(3, 3 + lookup.GIVE_UP_AFTER):
            reader(None, "/data/store", KEYS, version)
        reader(None, "/data/store", KEYS, 9)
    assert calls == ["delta-rs@1", "spark@1", "delta-rs@2",
                     "delta-rs@3", "spark@3", "delta-rs@4", "spark@4", "delta-rs@5", "spark@5",
                     "spark@9"]
    assert reader.fell_back and reader.reads == {"spark": 5, "delta-rs": 1}
    assert "fancyFeature" in caplog.text
    assert "for this batch" in caplog.text and "from now on" in caplog.text


def test_delta_rs_chosen_explicitly_fails_the_batch_instead(monkeypatch):
    calls, _ = _readers(monkeypatch, [True])
    with pytest.raises(OSError, match="fancyFeature"):
        lookup.Lookup("delta-rs")(None, "/data/store", KEYS, 1)
    assert calls == ["delta-rs@1"]


def test_an_unknown_reader_is_refused():
    with pytest.raises(ValueError, match="store.lookup = 'duckdb'"):
        lookup.Lookup("duckdb")


def test_no_keys_reads_nothing(monkeypatch):
    monkeypatch.setattr(lookup, "with_delta_rs", lambda *a, **k: pytest.fail("read"))
    empty = lookup.Lookup()(None, "/data/store", pa.array([], pa.binary()), 3)
    assert empty.num_rows == 0 and empty.schema == lookup.found_schema()


@given(values=st.lists(st.binary(max_size=40), max_size=60), data=st.data())
def test_a_binary_view_column_is_taken_from_as_a_cast_then_a_take_would(values, data):
    """``lookup.kept`` takes rows of DataFusion's ``binary_view`` columns through their
    views (pyarrow has no take for the type); values of up to 12 bytes sit in the views,
    longer ones in data buffers; a sliced array starts at an offset."""
    array = pa.array(values, pa.binary_view())
    start = data.draw(st.integers(0, len(values)))
    array = array.slice(start, data.draw(st.integers(0, len(values) - start)))
    rows = pa.array(sorted(data.draw(st.sets(st.integers(0, max(len(array) - 1, 0)),
                                              max_size=len(array)))), pa.int64())
    got = lookup.kept(array, rows)
    assert got.type == pa.binary()
    assert got.to_pylist() == array.cast(pa.binary()).take(rows).to_pylist()
    every = pa.array(range(len(values)), pa.int64())
    assert lookup.kept(pa.array(values, pa.binary()), every).to_pylist() == values


@given(hashes=st.lists(st.integers(-2**63, 2**63 - 1), max_size=40),
       column=st.lists(st.lists(st.integers(-2**63, 2**63 - 1), max_size=30), max_size=4),
       data=st.data())
def test_the_hash_set_finds_exactly_the_rows_is_in_finds(hashes, column, data):
    """``HashSet.rows`` against ``pc.is_in``: values drawn from the set (matches), next to a
    member (the same top bits: what the bitmap lets through to the exact test) and from the
    whole range, over any chunking, an empty set and an empty column included."""
    def value(v: int) -> int | None:
        if data.draw(st.integers(0, 9)) == 0:
            return None  # a row without a hash matches nothing
        if not hashes:
            return v
        how = data.draw(st.sampled_from(("member", "beside", "any")))
        member = data.draw(st.sampled_from(hashes))
        return member if how == "member" else (member ^ 1) if how == "beside" else v

    chunks = [[value(v) for v in chunk] for chunk in column]
    array = pa.chunked_array(chunks, type=pa.int64())
    want = pc.is_in(array, value_set=pa.array(hashes, pa.int64()))
    got = lookup.HashSet(pa.array(hashes, pa.int64())).rows(array)
    assert got.tolist() == [i for i, w in enumerate(want.to_pylist()) if w]


def test_matching_takes_each_batchs_rows_as_a_filter_of_all_batches_would():
    """``_matching`` over several scanned batches (DataFusion's ``binary_view`` keys, a
    batch with no match, matches only in later batches): the matching rows in scan order,
    in ``found_schema()``."""
    import numpy as np

    from ttl.store.layout import key_hashes

    keys = [b"key-%03d" % i + (b"-long-enough-to-leave-the-view" if i % 3 else b"")
            for i in range(60)]
    hashes = key_hashes(pa.array(keys, pa.binary())).to_numpy()

    def batch(lo: int, hi: int) -> pa.RecordBatch:
        return pa.record_batch({
            "key_hash": pa.array(hashes[lo:hi], pa.int64()),
            "key": pa.array(keys[lo:hi], pa.binary_view()),
            "ts": pa.array(range(lo, hi), pa.int64()),
            "expires_at": pa.array([None if i % 4 == 0 else i * 10 for i in range(lo, hi)],
                                   pa.int64()),
            "record_ttl": pa.array([None] * (hi - lo), pa.int64())})

    batches = [batch(0, 10), batch(10, 25), batch(25, 25), batch(25, 60)]
    wanted = sorted({3, 12, 24, 40, 59})
    found = lookup._matching(batches, lookup.HashSet(pa.array(hashes[wanted], pa.int64())))
    assert found.schema == lookup.found_schema()
    assert found["key"].to_pylist() == [keys[i] for i in wanted]
    assert found["ts"].to_pylist() == wanted
    assert found["expires_at"].to_pylist() == [None if i % 4 == 0 else i * 10 for i in wanted]
    assert found["key_hash"].to_pylist() == [int(h) for h in np.asarray(hashes)[wanted]]
    late = lookup._matching(batches, lookup.HashSet(pa.array(hashes[[30, 31]], pa.int64())))
    assert late["key"].to_pylist() == [keys[30], keys[31]]
    none = lookup._matching(batches, lookup.HashSet(pa.array([], pa.int64())))
    assert none.num_rows == 0 and none.schema == lookup.found_schema()
