"""Other engines read the store (operability: issue 15, item 7).

delta-rs (the ``deltalake`` package, no Spark) reads the store table with the live-entries
filter README gives, and gets exactly the engine's own view; the engine's small tables
(dead letters, lease, drill history) never declare the deletion-vectors reader feature.
"""

from __future__ import annotations

import pytest
from deltalake import DeltaTable  # a missing package fails the suite loudly

from tests.integration.test_eviction import NOW, recs
from ttl import eviction
from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.lease import Lease
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration


def _workload(store: DeltaStore) -> None:
    """Puts, an overwrite, a delete and a sweep: on a table with deletion vectors the
    delete and the sweep mark rows instead of rewriting files."""
    store.apply_records(recs(*[(f"k{i}".encode(), b"v", NOW - i * 100) for i in range(20)]))
    store.apply_records(recs((b"k1", b"new", NOW + 1), (b"k2", None, NOW + 1),
                             (b"late", b"v", NOW - 50_000)))
    store.wall_clock.set(NOW + 1_000)
    eviction.sweep(store, "wall")  # removes nothing live at NOW + 1000 but "late" expired


def _live_via_delta_rs_sql(path: str, now: int) -> dict[bytes, tuple[bytes, int]]:
    """README's recipe for any store (deletion vectors or not): delta-rs's SQL path with
    the live-entries filter."""
    from deltalake import QueryBuilder

    rows = QueryBuilder().register("store", DeltaTable(path)).execute(
        "SELECT key, value, ts FROM store "
        f"WHERE expires_at IS NULL OR expires_at > {now}").read_all()
    return {k: (v, ts) for k, v, ts in zip(*(rows[c].to_pylist() for c in (
        "key", "value", "ts")), strict=True)}


def _live_via_pyarrow(path: str, now: int) -> dict[bytes, tuple[bytes, int]]:
    """delta-rs's usual pyarrow path (tables without deletion vectors only)."""
    table = DeltaTable(path).to_pyarrow_table(columns=["key", "value", "ts", "expires_at"])
    return {k: (v, ts) for k, v, ts, e in zip(*(table[c].to_pylist() for c in (
        "key", "value", "ts", "expires_at")), strict=True) if e is None or e > now}


@pytest.mark.parametrize("deletion_vectors", [False, True])
def test_delta_rs_reads_the_store_as_the_engine_sees_it(spark, tmp_path, deletion_vectors):
    path = str(tmp_path / "store")
    conf = StoreConfig(name="interop", path=path, ttl=30_000,
                       deletion_vectors=deletion_vectors)
    store = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
    _workload(store)
    now = NOW + 1_000
    engine = {k: (e.value, e.ts) for k, e in store.entries(at=now).items()}
    assert engine and b"k2" not in engine and engine[b"k1"][0] == b"new"
    protocol = DeltaTable(path).protocol()
    assert ("deletionVectors" in (protocol.reader_features or [])) is deletion_vectors
    assert _live_via_delta_rs_sql(path, now) == engine
    if deletion_vectors:  # README says so: this path refuses the reader feature
        with pytest.raises(Exception, match="deletionVectors"):
            _live_via_pyarrow(path, now)
    else:
        assert _live_via_pyarrow(path, now) == engine


def test_the_engines_own_tables_declare_no_deletion_vectors(spark, tmp_path):
    path = str(tmp_path / "store")
    store = DeltaStore(spark, StoreConfig(name="interop", path=path, ttl=30_000),
                       wall_clock=FixedClock(NOW))
    store.apply_records([*recs((b"ok", b"v", NOW)), *recs((None, b"v", NOW))])
    lease = Lease(spark, path, duration_ms=60_000)
    assert lease.acquire()
    for table in (store.dead_letter_path, lease.path):
        features = DeltaTable(table).protocol().reader_features or []
        assert "deletionVectors" not in features, table
    assert DeltaTable(store.dead_letter_path).to_pyarrow_table(
        columns=["reason"])["reason"].to_pylist() == ["null_key"]
    assert DeltaTable(lease.path).to_pyarrow_table()["owner"].to_pylist() == [lease.owner]
    # Its log is kept three hours, not Delta's 30 days, and it has no change data
    # (``lease.TABLE_PROPERTIES``), though the session's defaults turn it on.
    configuration = DeltaTable(lease.path).metadata().configuration
    assert configuration["delta.logRetentionDuration"] == "interval 3 hours"
    assert configuration["delta.enableChangeDataFeed"] == "false"


def test_scraped_table_figures_count_expired_entries_and_report_the_last_drill(spark,
                                                                               tmp_path):
    """The metrics read from the tables (delta-rs, in the background): entries expired but
    not swept at the store's clock, and the last drill's result from the drill history."""
    from ttl.config import from_dict
    from ttl.drill import DrillReport, _record_drill
    from ttl.metrics import TableFigures

    conf = from_dict({"store": {"name": "interop", "path": str(tmp_path / "store"),
                                "ttl": "1s"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "stream": {"checkpoint": str(tmp_path / "ckpt")}})
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records(recs((b"a", b"v", NOW), (b"b", b"v", NOW)))  # long expired by now
    _record_drill(spark, conf, DrillReport("interop", 1, "y", NOW - 5_000))
    _record_drill(spark, conf, DrillReport("interop", 2, "y", NOW, missing=1))
    # A scrape copies what the figures' own thread last read: it never waits for a read.
    from tests.support import wait_until

    table = TableFigures(conf, every_s=3_600)
    try:
        figures = wait_until(lambda: {f.name: f.samples[0].value for f in table.collect()},
                             timeout=60, what="the figures' first read")
    finally:
        table.stop()
    assert figures == {"ttl_expired_not_swept": 2, "ttl_last_drill_match": 0.0,
                       "ttl_last_drill_timestamp_seconds": NOW / 1000}
