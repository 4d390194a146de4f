"""The batch lookup's two readers give the same rows at every version of a real table, and
the background snapshot warm-up keeps out of the batches' way.

The readers are also held to the reference model (``test_store_model.py``); this test adds
what short generated sequences rarely reach: deletion vectors from updates and deletes of
rows in older files, a Delta checkpoint (more than 10 commits), a version with no rows, an
operator's SQL between batches, and keys of every batch size.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from ttl import delta_log
from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.record import InputRecord
from ttl.store import DeltaStore, lookup
from ttl.store.store import WARM_GROUP

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def _rows(table: pa.Table) -> list[tuple]:
    return sorted(zip(*(table[c].to_pylist() for c in table.column_names), strict=True))


def test_delta_rs_and_spark_read_the_same_rows_at_every_version(spark, table_path,
                                                                monkeypatch):
    store = DeltaStore(spark, StoreConfig(name="lk", path=table_path, ttl=3_600_000),
                       wall_clock=FixedClock(NOW))
    keys = [b"k%03d" % i for i in range(60)]
    versions = [delta_log.latest_version(spark, table_path)]  # the empty table
    monkeypatch.setattr(delta_log, "CHECKPOINT_LOG_BYTES", 0)  # small commits: due at ten
    for n in range(14):  # past the engine's checkpoint cadence (10 commits)
        records = [InputRecord(k, None if (i + n) % 7 == 0 else b"v%d" % n, NOW + n,
                               (("h", b"x"),) if i % 2 else (), 0, n * 100 + i)
                   for i, k in enumerate(keys) if (i * 3 + n) % 4 != 0]
        store.apply_records(records, wall_ms=NOW + n)
        versions.append(delta_log.latest_version(spark, table_path))
        if n == 6:  # an operator's DELETE and UPDATE: deletion vectors in older files
            spark.sql(f"DELETE FROM delta.`{table_path}` WHERE key < CAST('k010' AS BINARY)")
            spark.sql(f"UPDATE delta.`{table_path}` SET ts = ts + 1 "
                      "WHERE key > CAST('k050' AS BINARY)")
            versions.append(delta_log.latest_version(spark, table_path))
    store.quiesce()  # the checkpoints are written in the background
    assert any(name.endswith(".checkpoint.parquet")
               for name in os.listdir(os.path.join(table_path, "_delta_log")))
    wanted_sets = [keys[:3], keys, [b"absent", keys[59]], keys[5:40] + [b"nope"]]
    compared = 0
    for number, version in enumerate(versions):
        for wanted in wanted_sets:
            want = pa.array(wanted, pa.binary())
            rust = lookup.with_delta_rs(table_path, want, version)
            with monkeypatch.context() as m:  # matched a few rows at a time: the same rows
                m.setattr(lookup, "MATCH_ROWS", 7)
                assert _rows(lookup.with_delta_rs(table_path, want, version)) == _rows(rust)
            # Spark's two readers in turns, version by version (the key filter, the
            # broadcast join), each against every version at the last ones.
            readers = ((lookup.LOOKUP_IN_LIST, 0) if number >= len(versions) - 2
                       else ((lookup.LOOKUP_IN_LIST, 0)[number % 2],))
            for in_list in readers:
                lookup.LOOKUP_IN_LIST, saved = in_list, lookup.LOOKUP_IN_LIST
                try:
                    theirs = lookup.with_spark(spark, table_path, want, version)
                finally:
                    lookup.LOOKUP_IN_LIST = saved
                assert [(f.name, f.type) for f in rust.schema] == \
                    [(f.name, f.type) for f in theirs.schema]
                assert _rows(rust) == _rows(theirs), (version, len(wanted))
                compared += 1
    assert compared == (len(versions) + 2) * len(wanted_sets)
    assert versions[-1] > 10
    latest = lookup.with_delta_rs(table_path, pa.array(keys, pa.binary()), versions[-1])
    assert 0 < latest.num_rows < len(keys)  # deletes and the operator's DELETE took rows
    assert lookup.with_delta_rs(table_path, pa.array(keys, pa.binary()), versions[0]).num_rows == 0


def test_the_snapshot_warm_up_runs_after_a_batch_in_its_own_job_group(spark, table_path):
    store = DeltaStore(spark, StoreConfig(name="wu", path=table_path),
                       wall_clock=FixedClock(NOW))
    tracker = spark.sparkContext.statusTracker()
    before = set(tracker.getJobIdsForGroup(WARM_GROUP))
    result = store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0)], wall_ms=NOW)
    assert result.applied and store.lookup.reads == {"delta-rs": 1}
    twin = store.for_thread()  # the stream's sweeper: one table, one newest warm-up
    assert twin._background.warming is store._background.warming is not None
    twin.settle()
    assert store._background.warming is None
    store.settle()  # twice (the batch thread and the stream's shutdown) is harmless
    # The warm-up computed the new version's state: its job ran under its own group, not
    # the batch's (whose job count it would otherwise distort).
    assert set(tracker.getJobIdsForGroup(WARM_GROUP)) - before


def test_a_batch_counts_only_the_jobs_it_ran_in_a_group_that_ran_many_before(spark):
    """A stream's batches run in its query's job group, which holds every job Spark still
    tracks: ``BatchPhases`` counts only the jobs started since the batch began."""
    from ttl.phases import BatchPhases

    sc = spark.sparkContext
    sc.setJobGroup("ttl-test-many-jobs", "a query's group", interruptOnCancel=False)
    try:
        for _ in range(30):
            sc.parallelize([1]).count()  # one job each
        phases = BatchPhases(spark)
        assert not phases._own_group  # the group already there is kept
        for _ in range(3):
            sc.parallelize([1]).count()  # one job each
        assert phases.spark_jobs() == 3
        assert len(phases._job_ids()) >= 33
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)


def test_a_table_with_many_deletion_vector_files_is_never_scanned_whole_by_delta_rs(
        spark, table_path, monkeypatch):
    """delta-rs hangs for good on one scan of a table with hundreds of files with deletion
    vectors (``lookup.DELTA_RS_MAX_DV_FILES``; 2 here): a lookup that would read that many
    files reads with Spark then (the same rows); ``ttl status`` counts the entries from the
    log and says the expired count is unknown, and ``ttl scan`` refuses, instead of
    hanging."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from ttl import delta_log, status
    from ttl.config import from_dict
    from ttl.errors import ScanBlocked

    store = DeltaStore(spark, StoreConfig(name="lk", path=table_path, ttl=3_600_000),
                       wall_clock=FixedClock(NOW))
    for part in range(3):  # three files, then deletion vectors on two of them
        store.apply_records([InputRecord(b"k%d-%d" % (part, i), b"v", NOW, (), 0, i)
                             for i in range(30)])
    for part in range(2):
        store.apply_records([InputRecord(b"k%d-%d" % (part, i), b"w", NOW, (), 0, i)
                             for i in range(25)])
    version = delta_log.latest_version(spark, table_path)
    assert lookup.deletion_vector_files(table_path, version) == 2
    monkeypatch.setattr(lookup, "DELTA_RS_MAX_DV_FILES", 2)
    many = pa.array([b"k2-%d" % i for i in range(lookup.PRUNE_KEYS + 1)], pa.binary())
    reader = lookup.Lookup("auto")
    found = reader(spark, table_path, many, version)
    assert reader.reads == {"spark": 1} and found.num_rows == lookup.PRUNE_KEYS + 1
    assert _rows(found) == _rows(lookup.with_spark(spark, table_path, many, version))
    # a small batch too, when the statistics skip too few files (every file here spans the
    # whole key_hash range); not a failure: delta-rs is tried again for the next
    reader(spark, table_path, many[:3], version)
    assert reader.reads == {"spark": 2} and not reader.fell_back and not reader.failures
    monkeypatch.setattr(lookup, "DELTA_RS_MAX_DV_FILES", 3)
    reader(spark, table_path, many[:3], version)
    assert reader.reads == {"spark": 2, "delta-rs": 1}
    monkeypatch.setattr(lookup, "DELTA_RS_MAX_DV_FILES", 2)
    counts = status.entry_counts(DeltaTable(table_path), NOW)
    assert counts["total"] == 90 and "deletion vectors" in counts["live"]
    conf = from_dict({"store": {"name": "lk", "path": table_path, "ttl": "1h"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "stream": {"checkpoint": "unused"}})
    with pytest.raises(ScanBlocked, match="deletion vectors"):
        status.scan(conf, 5, wall_ms=NOW)


def test_a_batch_looks_up_and_folds_while_the_previous_snapshot_is_computed(spark,
                                                                            table_path):
    """The driver's path waits for the previous commit's snapshot (``settle``) only after
    its delta-rs lookup and its fold, which need no Spark, and writes once it is there."""
    import threading

    from tests.support import wait_until

    store = DeltaStore(spark, StoreConfig(name="ov", path=table_path),
                       wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0)], wall_ms=NOW)
    store.settle()
    before = delta_log.latest_version(spark, table_path)
    warming = threading.Event()  # a warm-up that has not finished
    store._background.warming = warming
    real_settle, waited = store.settle, []

    def settle() -> None:  # the lookups made so far, when the batch starts to wait
        waited.append(store.lookup.reads["delta-rs"])
        real_settle()

    store.settle = settle
    done: list = []
    batch = threading.Thread(target=lambda: done.append(store.apply_records(
        [InputRecord(b"a", b"2", NOW + 1, (), 0, 1)], wall_ms=NOW + 1)))
    batch.start()
    try:
        wait_until(lambda: waited, what="the batch to wait for the snapshot")
        assert waited == [2]  # after its own lookup
        assert not done and delta_log.latest_version(spark, table_path) == before
    finally:
        warming.set()
        batch.join(120)
    assert done and done[0].applied and done[0].version == before + 1
    assert store.get(b"a") == b"2"


def test_a_streams_sweep_warms_the_new_snapshot_and_a_commands_does_not(spark, table_path):
    """After a stream's sweep (``warm=True``) the new version's snapshot is computed in
    the background, as after a batch, so the next batch's write need not; a command's
    sweep (``ttl evict``) leaves only a checkpoint, when due."""
    from ttl import eviction

    store = DeltaStore(spark, StoreConfig(name="sw", path=table_path, ttl=1_000),
                       wall_clock=FixedClock(NOW))
    tracker = spark.sparkContext.statusTracker()
    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0),
                         InputRecord(b"b", b"1", NOW + 5_000, (), 0, 1)], wall_ms=NOW)
    store.settle()
    sweeper = store.for_thread()  # as the stream's scheduler sweeps
    before = set(tracker.getJobIdsForGroup(WARM_GROUP))
    swept = eviction.sweep(sweeper, "wall", NOW + 2_000, warm=True)
    assert swept.evicted == 1 and store._background.warming is not None
    store.settle()  # the stream's next batch waits for the sweeper's warm-up
    assert set(tracker.getJobIdsForGroup(WARM_GROUP)) - before
    before = set(tracker.getJobIdsForGroup(WARM_GROUP))
    swept = eviction.sweep(store, "wall", NOW + 7_000)
    assert swept.evicted == 1 and store._background.warming is None
    store.quiesce()
    assert set(tracker.getJobIdsForGroup(WARM_GROUP)) == before
