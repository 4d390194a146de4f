"""The Delta store: layout, batch semantics through Spark, dead letters, stream time, reads."""

from __future__ import annotations

import json
import os
import re
from functools import partial

import pytest

from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.errors import InvalidRecordError, LayoutError
from ttl.record import Entry, InputRecord, ValueTimestampHeaders
from ttl.store import DeltaStore
from ttl.store.layout import PROP_FORMAT, PROP_TTL
from ttl.timestamps import INT64_MAX

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000
TTL = 60_000


def make_store(spark, path, ttl=TTL, clock="wall", now=NOW, **kw) -> DeltaStore:
    conf = StoreConfig(name="s", path=path, ttl=ttl, **kw)
    return DeltaStore(spark, conf, clock=clock, wall_clock=FixedClock(now))


def test_key_hashes_are_sparks_xxhash64_of_the_keys(spark):
    """The driver's ``key_hash`` (``layout.key_hashes``) is what Spark's ``xxhash64(key)``
    gives, for empty keys, keys around XXH64's 4-, 8- and 32-byte steps, long ones, and
    hashes on both sides of the sign bit."""
    import random

    import pyarrow as pa
    from pyspark.sql import functions as F

    from ttl.store.layout import key_hashes

    rnd = random.Random(5)
    keys = [rnd.randbytes(n) for n in (*range(0, 70), 100, 1000, 5000) for _ in range(20)]
    keys = pa.array(keys, pa.binary())
    mine = key_hashes(keys).to_pylist()
    frame = spark.createDataFrame(pa.table({"key": keys, "i": pa.array(range(len(keys)))}))
    theirs = [r.h for r in frame.select("i", F.xxhash64("key").alias("h")).orderBy("i")
              .collect()]
    assert mine == theirs
    assert min(mine) < 0 < max(mine)


def test_a_batch_writes_one_file_per_50k_rows_and_a_small_one_a_single_file(spark, table_path,
                                                                           monkeypatch):
    """A trickle's batch of a few rows is one task and one file (Spark would split the
    driver's rows into ``spark.default.parallelism`` partitions however few they are); a
    larger one gets one partition per ``ROWS_PER_TASK`` rows. Counted in the commits'
    ``numFiles`` (an append) and in the frame's partitions."""
    import pyarrow as pa

    from ttl import delta_log
    from ttl.phases import BatchPhases
    from ttl.store import write

    assert spark.sparkContext.defaultParallelism > 3  # else the test could not fail
    # A stream's queries outgrow Spark's default 100 cached classes (conf/spark-defaults.conf)
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == "1000"
    store = make_store(spark, table_path)
    phases = BatchPhases(spark)
    store.apply_records([InputRecord(b"k%d" % i, b"v", NOW) for i in range(30)],
                        wall_ms=NOW, phases=phases)
    assert delta_log.latest_commit(spark, table_path).metric("numFiles") == 1
    assert phases.codegen_compiles() is not None and phases.codegen_compiles() >= 0
    phases.close()
    monkeypatch.setattr(write, "ROWS_PER_TASK", 10)
    store.apply_records([InputRecord(b"n%d" % i, b"v", NOW) for i in range(25)], wall_ms=NOW)
    assert delta_log.latest_commit(spark, table_path).metric("numFiles") == 3
    # Above Spark's local-relation threshold the rows arrive one partition per Arrow batch:
    # coalesced all the same.
    monkeypatch.setattr(write, "ROWS_PER_TASK", 50_000)
    rows = pa.concat_tables([pa.table({"i": pa.array(range(1_000))})] * 6)
    threshold = "spark.sql.execution.arrow.localRelationThreshold"
    before = spark.conf.get(threshold)
    spark.conf.set(threshold, "0")
    try:
        assert spark.createDataFrame(rows).rdd.getNumPartitions() == 6
        assert write.frame(spark, rows).rdd.getNumPartitions() == 1
    finally:
        spark.conf.set(threshold, before)


def test_table_is_created_with_layout_properties_and_reopened_idempotently(spark, table_path):
    make_store(spark, table_path)
    make_store(spark, table_path)  # reopening with the same settings is fine
    props = spark.sql(f"DESCRIBE DETAIL delta.`{table_path}`").first()["properties"]
    assert props[PROP_FORMAT] == "3"
    assert props[PROP_TTL] == str(TTL)
    assert props["delta.enableChangeDataFeed"] == "true"
    assert props["delta.enableDeletionVectors"] == "true"
    assert props["delta.checkpointInterval"] == "1000"  # the engine checkpoints (below)


def _checkpoints(path: str) -> list[int]:
    return sorted(int(n.split(".")[0]) for n in os.listdir(f"{path}/_delta_log")
                  if n.endswith(".checkpoint.parquet"))


def test_checkpoints_are_written_in_the_background_when_due(spark, table_path, monkeypatch):
    """Delta's own checkpoint (inside the commit reaching ``delta.checkpointInterval``, set
    to 1000) would add a second to every tenth batch: the store writes it after the batch,
    in the background, once one is due (here after ten commits, whatever their size); a
    sweep's commit and maintenance's OPTIMIZE do the same (other writers' commits
    counted)."""
    from ttl import delta_log, eviction

    monkeypatch.setattr(delta_log, "CHECKPOINT_LOG_BYTES", 0)
    checkpoints = partial(_checkpoints, table_path)

    def operator_commits(n: int) -> int:
        for i in range(n):
            spark.sql(f"UPDATE delta.`{table_path}` SET value = X'0{i}' WHERE key = X'6b30'")
        return delta_log.latest_version(spark, table_path)

    store = make_store(spark, table_path)
    for n in range(12):
        store.apply_records([InputRecord(b"k%d" % n, b"v", NOW + n, (), 0, n)])
    store.quiesce()
    written = checkpoints()
    assert written and written[0] >= 9, written  # the first after ten commits (0..9)
    assert delta_log.checkpoint_if_due(spark, table_path) is None  # not due again yet
    latest = operator_commits(10)
    eviction.optimize(store)
    store.quiesce()
    assert checkpoints()[-1] >= latest, (checkpoints(), latest)
    latest = operator_commits(10)
    swept = eviction.sweep(store, "wall", t=NOW + TTL + 100)
    assert swept.evicted == 12
    store.quiesce()
    assert checkpoints()[-1] >= latest + 1, (checkpoints(), latest)  # the sweep's version


def test_small_commits_wait_for_more_of_them_before_a_checkpoint(spark, table_path,
                                                                 monkeypatch):
    """A trickle's commits are small: ten of them are not a checkpoint yet (each one
    beside a batch slowed it), the maximum count is, and so is ten or more holding the
    size bound; the log's size, read from the snapshot's listing, is the size of the
    commit files after the last checkpoint."""
    from ttl import delta_log

    store = make_store(spark, table_path)
    for n in range(12):
        store.apply_records([InputRecord(b"k%d" % n, b"v", NOW + n, (), 0, n)])
    store.quiesce()
    assert _checkpoints(table_path) == []
    log_dir = f"{table_path}/_delta_log"
    on_disk = sum(os.path.getsize(f"{log_dir}/{n}") for n in os.listdir(log_dir)
                  if n.endswith(".json"))
    size = delta_log._log_bytes(delta_log._updated(spark, table_path))
    assert size == on_disk and 0 < size < delta_log.CHECKPOINT_LOG_BYTES
    commits = delta_log.latest_version(spark, table_path) + 1  # versions 0.. without one
    monkeypatch.setattr(delta_log, "CHECKPOINT_MAX_COMMITS", commits + 2)
    store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 12)])
    store.quiesce()
    assert _checkpoints(table_path) == []
    store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 13)])
    store.quiesce()
    first = delta_log.latest_version(spark, table_path)
    assert _checkpoints(table_path) == [first]
    # After a checkpoint only the commits after it count, towards the size as well.
    for n in range(10):
        store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 14 + n)])
    store.quiesce()
    assert _checkpoints(table_path) == [first]  # ten small commits
    after = sum(os.path.getsize(f"{log_dir}/{v:020d}.json")
                for v in range(first + 1, delta_log.latest_version(spark, table_path) + 1))
    assert delta_log._log_bytes(delta_log._updated(spark, table_path)) == after
    monkeypatch.setattr(delta_log, "CHECKPOINT_LOG_BYTES", after + 1)  # the next one reaches it
    store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 24)])
    store.quiesce()
    assert _checkpoints(table_path) == [first, delta_log.latest_version(spark, table_path)]


def test_opening_with_another_ttl_names_both_values(spark, table_path):
    make_store(spark, table_path)
    with pytest.raises(LayoutError, match=r"60000 ms.*says 120000"):
        make_store(spark, table_path, ttl=120_000)


def test_opening_a_v1_table_asks_for_an_upgrade(spark, table_path):
    spark.sql(f"CREATE TABLE delta.`{table_path}` (key BINARY, value BINARY) USING delta")
    with pytest.raises(LayoutError, match=r"v1.*ttl upgrade"):
        make_store(spark, table_path)


def test_batch_applies_semantics_counts_and_dead_letters(spark, table_path):
    store = make_store(spark, table_path)
    hdrs = (("h", b"1"), ("n", None), ("h", b"2"))
    records = [
        InputRecord(b"a", b"a1", NOW - 10, hdrs, 0, 0),
        InputRecord(b"a", b"a2", NOW - 20, (), 0, 1),           # older ts: max kept (update)
        InputRecord(None, b"x", NOW, (), 0, 2),                 # null key
        InputRecord(b"b", b"b1", NOW - TTL, (), 0, 3),          # expired on arrival
        InputRecord(b"c", None, NOW, (), 0, 4),                 # delete of an absent key
        InputRecord(b"d", b"d1", NOW, (("ttl.ttl", b"-5"),), 1, 0),   # bad engine header
        InputRecord(b"e", b"e1", -1, (), 1, 1),                 # missing timestamp
        InputRecord(b"f", b"f1", -1,
                    (("ttl.ts", b"-86400000"), ("ttl.ttl", str(INT64_MAX).encode())), 1, 2),
        InputRecord(b"", b"", NOW, (), 1, 3),                   # empty key and value
    ]
    result = store.apply_records(records)
    c = result.counts
    assert (c.records, c.upserted, c.expired_on_arrival, c.delete_absent) == (9, 4, 1, 1)
    assert dict(c.rejected) == {"null_key": 1, "bad_engine_header": 1, "missing_timestamp": 1}
    assert store.entries() == {
        b"a": Entry(b"a2", NOW - 10, (), NOW - 10 + TTL),
        b"f": Entry(b"f1", -86_400_000, (), INT64_MAX - 86_400_000, INT64_MAX),
        b"": Entry(b"", NOW, (), NOW + TTL),
    }
    dead = {r.reason: r for r in spark.read.format("delta").load(store.dead_letter_path).collect()}
    assert set(dead) == {"null_key", "bad_engine_header", "missing_timestamp"}
    bad = dead["bad_engine_header"]
    assert (bytes(bad.key), bytes(bad.value), bad.timestamp) == (b"d", b"d1", NOW)
    assert (bad.source_partition, bad.source_offset) == (1, 0)
    assert [(h.key, bytes(h.value)) for h in bad.headers] == [("ttl.ttl", b"-5")]
    assert bad.rejected_at == NOW


def test_headers_keep_order_duplicates_and_nulls_and_negative_timestamps(spark, table_path):
    store = make_store(spark, table_path, ttl=None)
    hdrs = (("z", b"1"), ("a", None), ("z", b""), ("a", b"2"))
    store.put(b"k", b"v", -5_000_000_000_000, hdrs)
    assert store.get_with_timestamp(b"k") == ValueTimestampHeaders(b"v", -5_000_000_000_000, hdrs)
    assert store.entries()[b"k"].expires_at is None


def test_stream_time_is_persisted_recovered_and_never_regresses(spark, table_path):
    store = make_store(spark, table_path, clock="stream")
    assert store.stream_time.value is None
    store.apply_records([InputRecord(b"a", b"1", NOW - 5, (), 0, 0)])
    # A batch that changes no row still commits its stream time (regression: Delta makes no
    # commit for an empty append, so a reopened store recovered an older stream time).
    noop = store.apply_records([InputRecord(b"zz", None, NOW + 100, (), 0, 1)])
    assert noop.applied and store.stream_time.value == NOW + 100
    store.apply_records([InputRecord(b"zz", None, NOW - 500, (), 0, 2)])  # older: no regress
    assert store.stream_time.value == NOW + 100
    reopened = make_store(spark, table_path, clock="stream")
    assert reopened.stream_time.value == NOW + 100


def test_reads_hide_expired_entries_before_any_sweep(spark, table_path):
    store = make_store(spark, table_path)
    store.put_all([(b"a", b"1", NOW - 1_000, ()), (b"b", b"2", NOW - 30_000, ())])
    assert store.approximate_num_entries() == 2
    store.wall_clock.set(NOW + 30_000)     # b expires at NOW + 30 s exactly
    assert store.get(b"b") is None
    assert [k for k, _ in store.all()] == [b"a"]
    assert [k for k, _ in store.range(b"a", b"b")] == [b"a"]
    store.create_view("live_s")
    assert spark.sql("SELECT count(*) FROM global_temp.live_s").first()[0] == 0  # wall: real now
    assert spark.read.format("delta").load(table_path).count() == 2  # not swept, only hidden


def test_point_api_put_if_absent_and_delete(spark, table_path):
    store = make_store(spark, table_path)
    assert store.put_if_absent(b"k", b"first", NOW) is None
    assert store.put_if_absent(b"k", b"second", NOW).value == b"first"
    assert store.delete(b"k", NOW).value == b"first"
    assert store.get(b"k") is None
    with pytest.raises(InvalidRecordError, match="future_timestamp"):
        store.put(b"k", b"v", NOW + 2 * 86_400_000)


def test_replayed_batch_with_the_same_txn_is_not_applied_twice(spark, table_path):
    store = make_store(spark, table_path)
    batch = [InputRecord(b"a", b"1", NOW, (), 0, 0)]
    first = store.apply_records(batch, txn=("app-s-batch", 7))
    again = store.apply_records(batch, txn=("app-s-batch", 7))
    assert first.applied and not again.applied
    assert again.version == first.version
    assert store.apply_records(batch, txn=("app-s-batch", 8)).applied


@pytest.mark.parametrize("path", ["driver", "executors"])
def test_a_replayed_batch_that_changes_no_row_is_not_committed_again(spark, table_path, path):
    """A batch whose records change no row still commits (its stream time and input
    position), under its txn id: run again after that commit (a crash before the checkpoint
    caught up), Delta skips it like any other replay, and the log gets no second commit."""
    from ttl import delta_log
    from ttl.store.fold import records_table

    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0)])
    noop = [InputRecord(b"absent", None, NOW, (), 0, 1),  # a delete of an absent key
            InputRecord(b"gone", b"x", NOW - TTL, (), 0, 2)]  # absent, expired on arrival

    def apply(txn):
        if path == "driver":
            return store.apply_records(noop, txn=txn)
        return store.apply_frame(spark.createDataFrame(records_table(noop)),
                                 metadata=lambda figures: {}, txn=txn)

    first = apply(("app", 3))
    assert (first.write, first.applied) == ("empty", True)
    assert delta_log.commit_info(spark, table_path, first.version).metadata["stream_time"] == NOW
    again = apply(("app", 3))
    assert (again.write, again.applied, again.version) == ("skipped", False, first.version)
    assert delta_log.latest_version(spark, table_path) == first.version
    assert apply(("app", 4)).applied  # the next batch's no-op commit is made


@pytest.mark.parametrize(("path", "later"), [("driver", True), ("executors", False)],
                         ids=["driver-a-later-clock", "executors-an-earlier-clock"])
def test_a_batch_run_again_after_its_dead_letters_takes_their_wall_clock(spark, tmp_path, path,
                                                                         later):
    """A run that committed a batch's dead letters and failed before the batch's commit
    (here: its dead-letter commit made as that run made it, at its wall clock A) leaves the
    batch to the next run, at another wall clock B, whose dead letters Delta skips by their
    txn id. A record whose timestamp is in the future at one clock and not at the other
    must end up in exactly one place: with B later, stored (and dead-lettered by A); with B
    earlier, rejected now and in neither. The batch runs again at A's clock. On the driver
    the store itself ran the batch before under its lease, which it then gave up and took
    again (another process may have run the next batch meanwhile, as here)."""
    from ttl import delta_log
    from ttl.lease import Lease
    from ttl.model import Semantics
    from ttl.store import write
    from ttl.store.fold import fold_table, records_table, stored_arrow_schema

    wall_a, wall_b = (NOW, NOW + 10_000) if later else (NOW + 10_000, NOW)
    max_future = 86_400_000
    edge = [InputRecord(b"edge", b"v", NOW + max_future + 5_000, (), 0, 1)]
    batch = [InputRecord(None, b"no key", NOW, (), 0, 0), *edge,
             InputRecord(b"k", b"v", NOW, (), 0, 2)]
    txn = ("app-query", 5)
    table = str(tmp_path / "store")
    store = make_store(spark, table, now=wall_b)
    if path == "driver":
        store.lease = Lease(spark, table)
        assert store.lease.acquire()
        store.apply_records([InputRecord(b"before", b"v", NOW, (), 1, 0)], txn=(txn[0], 4))
        store.lease.release()
        assert store.lease.acquire()
    folded = fold_table(records_table(batch), stored_arrow_schema().empty_table(), wall_a,
                        wall_a, Semantics.from_config(store.conf))
    write._write_dead_letters(store.spark, folded.rejects, store.dead_letter_path, wall_a, txn)
    if path == "driver":
        result = store.apply_records(batch, txn=txn)
    else:
        result = store.apply_frame(spark.createDataFrame(records_table(batch)),
                                   metadata=lambda figures: {}, txn=txn)
    assert result.applied
    assert delta_log.commit_info(spark, table, result.version).metadata["wall"] == wall_a
    dead = [(r.key and bytes(r.key), r.reason, r.rejected_at) for r in
            spark.read.format("delta").load(store.dead_letter_path).collect()]
    stored = set(store.entries(at=NOW)) - {b"before"}
    if later:  # A rejected it: rejected again, not stored
        assert sorted(dead, key=repr) == [(None, "null_key", wall_a),
                                          (b"edge", "future_timestamp", wall_a)]
        assert stored == {b"k"}
    else:  # A took it: taken again, not lost
        assert dead == [(None, "null_key", wall_a)]
        assert stored == {b"k", b"edge"}
    # The next batch is at the store's own clock again.
    follows = store.apply_records([InputRecord(None, b"x", NOW, (), 0, 3)], txn=(txn[0], 6))
    assert delta_log.commit_info(spark, table, follows.version).metadata["wall"] == wall_b


def test_a_batch_that_upserts_is_a_replace_and_gives_the_merges_table(spark, tmp_path,
                                                                     monkeypatch):
    """A batch that upserts (stored keys and new ones, with or without removals) is one
    replace commit (Delta's ``replaceOn``): the stored rows of its changed keys go, its
    upserts come in, every other row stays; the table is the one a MERGE gives, and a replay
    by its txn id is skipped. A batch that only removes keys is a MERGE."""
    from ttl import delta_log
    from ttl.store import write
    from ttl.timestamps import NO_TIMESTAMP

    load = [InputRecord(b"k%02d" % i, b"v", NOW, (), 0, i) for i in range(40)]
    upserts = [InputRecord(b"k01", b"new", NOW + 1, (("h", b"x"), ("h", None)), 0, 100),
               InputRecord(b"k02", b"older", NOW - 1, (), 0, 101),
               InputRecord(b"k05", b"a", NOW + 1, (), 0, 102),
               InputRecord(b"k05", b"b", NOW + 1, (), 0, 103),
               InputRecord(b"fresh", b"f", NOW, (("ttl.ttl", b"5000"),), 0, 104)]
    mixed = [InputRecord(b"k03", None, NOW + 2, (), 0, 105),  # a removal beside upserts
             InputRecord(b"k04", b"w", NOW + 2, (), 0, 106),
             InputRecord(b"k06", b"x", NOW + 2, (), 0, 107),
             InputRecord(b"k06", None, NOW + 3, (), 0, 108),  # upserted, then removed
             InputRecord(b"absent", None, NOW + 2, (), 0, 109),
             InputRecord(b"k07", b"old", NOW - 5, (), 0, 110)]  # older than the stored
    removals = [InputRecord(b"k08", None, NOW + 2, (), 0, 111),
                InputRecord(b"k09", None, NOW + 2, (), 0, 112)]
    tables, counts = {}, {}
    monkeypatch.setattr(write, "positional_enabled", lambda _spark: False)  # Delta's writes
    for way in ("replace", "merge"):
        monkeypatch.setattr(write, "_REPLACE_SUPPORTED", way == "replace")
        path = str(tmp_path / way)
        store = make_store(spark, path)
        assert store.apply_records(load).write == "append"
        for n, batch in enumerate((upserts, mixed)):
            first = store.apply_records(batch, txn=("app", n))
            assert first.write == way and first.applied
            counts[way, n] = first.counts.as_dict()
            assert delta_log.commit_info(spark, path, first.version).operation == \
                ("WRITE" if way == "replace" else "MERGE")
            again = store.apply_records(batch, txn=("app", n))
            assert not again.applied and again.version == first.version
        removed = store.apply_records(removals)
        assert removed.write == "merge" and removed.rows_deleted == 2
        tables[way] = store.entries(at=NO_TIMESTAMP)
    assert tables["replace"] == tables["merge"]
    assert all(counts["replace", n] == counts["merge", n] for n in (0, 1))
    assert len(tables["replace"]) == 37  # 40 + fresh - k03 - k06 - k08 - k09
    assert tables["replace"][b"k05"].value == b"b"  # the later of two equal timestamps
    assert tables["replace"][b"k04"].value == b"w" and b"k06" not in tables["replace"]
    rows = spark.read.format("delta").load(str(tmp_path / "replace"))
    assert rows.count() == 37  # one row per key: nothing inserted twice
    for way in ("replace", "merge"):  # key_hash, computed in the driver, is Spark's
        written = spark.read.format("delta").load(str(tmp_path / way))
        assert written.where("key_hash != xxhash64(key)").count() == 0
        assert written.where(f"updated_at IS NULL OR updated_at != {NOW}").count() == 0
        assert not written.schema["key_hash"].nullable  # the table's schema stays
    # Removals beside upserts need replaceOn; with Delta's switch for it off, such a batch
    # is a MERGE, while a batch of upserts only is still a replace (replaceUsing).
    monkeypatch.setattr(write, "_REPLACE_SUPPORTED", None)
    store = make_store(spark, str(tmp_path / "switch"))
    store.apply_records(load)
    store.spark.conf.set(write.REPLACE_ON_ENABLED, "false")
    try:
        assert store.apply_records(upserts).write == "replace"
        assert store.apply_records(mixed).write == "merge"
    finally:
        store.spark.conf.unset(write.REPLACE_ON_ENABLED)
    store.apply_records(removals)
    assert store.entries(at=NO_TIMESTAMP) == tables["replace"]


# Only the MERGE (forced: a batch that upserts is a replace): a replace commits so soon
# after its snapshot that an operator's UPDATE started beside it lands inside its window
# about once in a hundred batches (one to four minutes here), too slow and too uncertain
# for the suite. The replace conflicts
# the same way (its delete reads every file; seen in a throwaway run: ConcurrentAppend,
# retried, one row per key).
@pytest.mark.parametrize("write", ["merge"])
def test_a_batch_that_conflicts_with_an_operators_commit_runs_again(spark, table_path, write,
                                                                    monkeypatch):
    """Reliability 9: an operator's UPDATE committed while a batch's write runs makes Delta
    abort the write with a conflict; the batch runs again on the new version (it used to
    fail the stream), whichever write it makes. Each batch starts together with an
    operator's UPDATE, so the two race to commit, until a batch has conflicted (bounded
    by a deadline); then the operator stops, so the batch's retry can win."""
    import logging
    import threading
    import time

    from ttl.delta_log import conflicts
    from ttl.store import write as writes

    monkeypatch.setattr(writes, "_REPLACE_SUPPORTED", write == "replace")
    monkeypatch.setattr(writes, "positional_enabled", lambda _spark: False)  # Delta's
    store = make_store(spark, table_path, ttl=None)
    keys = [b"k%02d" % i for i in range(20)]
    store.apply_records([InputRecord(k, b"v0", NOW, (), 0, i)
                         for i, k in enumerate([*keys, b"gone0"])])
    stop, go, started = threading.Event(), threading.Event(), threading.Event()
    operator_commits = []

    class Conflicted(logging.Handler):
        """The operator stops once a batch has conflicted, so the batch's retry can win."""

        def emit(self, record: logging.LogRecord) -> None:
            if "conflicted with a concurrent commit" in record.getMessage():
                stop.set()

    def operator() -> None:
        session = spark.newSession()
        while not stop.is_set():
            if not go.wait(timeout=1.0):
                continue
            go.clear()
            started.set()  # the batch starts now too
            try:
                session.sql(f"UPDATE delta.`{table_path}` SET value = X'6f70' "
                            f"WHERE key = X'{keys[0].hex()}'")
                operator_commits.append(1)
            except conflicts():
                pass

    handler = Conflicted()
    logging.getLogger("ttl.delta_log").addHandler(handler)
    thread = threading.Thread(target=operator, daemon=True)
    thread.start()
    retries, batch = 0, 0
    deadline = time.monotonic() + 300
    try:
        while retries == 0 and time.monotonic() < deadline:
            batch += 1
            started.clear()
            go.set()
            assert started.wait(timeout=120), "the operator did not start its UPDATE"
            # A MERGE batch removes the key the batch before added (gone0: the load).
            removal = [InputRecord(b"gone%d" % (batch - 1), None, NOW + batch, (), 0,
                                   100 * batch + 99),
                       InputRecord(b"gone%d" % batch, b"g", NOW + batch, (), 0,
                                   100 * batch + 98)] if write == "merge" else []
            written = store.apply_records(
                [InputRecord(k, b"v%d" % batch, NOW + batch, (), 0, 100 * batch + i)
                 for i, k in enumerate(keys)] + removal)
            assert written.applied and written.counts.upserted == len(keys) + len(removal) // 2
            assert written.write == write
            retries += written.retries
    finally:
        stop.set()
        thread.join(timeout=120)
        logging.getLogger("ttl.delta_log").removeHandler(handler)
    assert operator_commits and retries >= 1, (batch, len(operator_commits))
    rows = spark.read.format("delta").load(table_path).count()
    assert rows == len(keys) + 1  # one row per key (gone<last> or gone0)
    entries = store.entries()
    assert {k: entries[k].value for k in keys[1:]} == {k: b"v%d" % batch for k in keys[1:]}


def test_a_replace_by_position_that_conflicts_with_an_operators_commit_runs_again(
        spark, table_path, monkeypatch):
    """An operator's UPDATE of one of the batch's files commits inside the replace by
    position's transaction (planted there, after its deletion vectors are written and
    before its commit): Delta's conflict checks, against every commit after the lookup's
    version, abort it; the batch runs again on the new version and keeps the operator's
    other change."""
    from ttl.store import positional

    store = make_store(spark, table_path, ttl=None)
    store.apply_records([InputRecord(b"k%d" % i, b"v0", NOW, (), 0, i) for i in range(10)])
    register, planted = positional._register_metrics, []

    def operator_first(*args, **kwargs):
        if not planted:
            planted.append(1)
            spark.newSession().sql(f"UPDATE delta.`{table_path}` SET value = X'6f70' "
                                   f"WHERE key = X'{b'k5'.hex()}'")  # in the same file
        return register(*args, **kwargs)

    monkeypatch.setattr(positional, "_register_metrics", operator_first)
    result = store.apply_records([InputRecord(b"k1", b"v1", NOW + 1, (), 0, 20),
                                  InputRecord(b"k2", b"v1", NOW + 1, (), 0, 21)])
    assert planted and result.retries == 1 and result.write == "positional"
    entries = store.entries()
    assert len(entries) == 10 and entries[b"k1"].value == entries[b"k2"].value == b"v1"
    assert entries[b"k5"].value == b"op"  # the operator's, not overwritten
    rows = spark.read.format("delta").load(table_path)
    assert rows.count() == rows.select("key").distinct().count() == 10


def test_a_commit_between_the_lookup_and_the_write_makes_the_batch_look_up_again(
        spark, table_path):
    """An operator's DELETE commits after the batch's lookup read the key (here: from
    inside the lookup, the real seam). The fold against the older version would drop a
    valid put as late (``late_records = drop``); the batch must see the DELETE: its result
    is the reference model's over the state after it."""
    from ttl.model import ReferenceStore, Semantics
    from ttl.store.lookup import Lookup

    late_records = "drop"
    store = make_store(spark, table_path, late_records=late_records)
    store.apply_records([InputRecord(b"a", b"stored", -1, (("ttl.ts", str(NOW).encode()),),
                                     0, 0)])
    deleted: list[int] = []

    class DeleteDuringTheLookup(Lookup):
        def __call__(self, spark_, path, keys, version):
            found = super().__call__(spark_, path, keys, version)
            if not deleted:  # the operator's DELETE lands once, after this read
                spark.sql(f"DELETE FROM delta.`{table_path}` WHERE key = X'61'")
                deleted.append(version)
            return found

    store.lookup = DeleteDuringTheLookup(store.conf.lookup)
    batch = [InputRecord(b"a", b"older", -1, (("ttl.ts", str(NOW - 10).encode()),), 0, 1)]
    result = store.apply_records(batch)
    assert deleted and result.applied
    model = ReferenceStore(Semantics(ttl=TTL, late_records=late_records))  # a is gone
    model.apply_batch(batch, NOW)
    expected = {k: (e.value, e.ts) for k, e in model.entries.items()}
    assert {k: (e.value, e.ts) for k, e in store.entries().items()} == expected
    assert expected == {b"a": (b"older", NOW - 10)}


def test_a_commit_between_the_last_version_check_and_the_write_is_named(
        spark, table_path, monkeypatch, caplog):
    """Delta's writers take no expected version: a commit that lands after the batch's last
    check of the version and before its write's transaction reads the table is checked by
    neither (the batch's fold did not see it, Delta compares the commit only with later
    ones). The operator's UPDATE is made right there (as the write's commit settings are
    applied, the real seam): the batch's result and a warning name its version."""
    import logging

    from ttl import commit

    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"a", b"stored", NOW, (), 0, 0)])
    made: list[int] = []
    settings = commit.commit_settings

    def operator_first(spark_, meta, txn):
        if not made:  # once: the operator's commit, before the batch's write starts
            spark.sql(f"UPDATE delta.`{table_path}` SET value = X'6f70' WHERE key = X'61'")
            made.append(1)
        return settings(spark_, meta, txn)

    monkeypatch.setattr(commit, "commit_settings", operator_first)
    with caplog.at_level(logging.WARNING, logger="ttl.store.write"):
        result = store.apply_records([InputRecord(b"b", b"new", NOW + 1, (), 0, 1)])
    assert made and result.applied
    checked = result.version_before
    assert result.unchecked == (checked + 1, checked + 1)
    assert result.version == checked + 2
    assert any(f"version(s) {checked + 1}-{checked + 1} landed" in r.getMessage()
               for r in caplog.records)
    assert {k: e.value for k, e in store.entries().items()} == {b"a": b"op", b"b": b"new"}
    monkeypatch.setattr(commit, "commit_settings", settings)
    assert store.apply_records([InputRecord(b"c", b"v", NOW, (), 0, 2)]).unchecked is None


def _named_write(spark, named_write: str, monkeypatch) -> None:
    """A small batch's write that names its keys: ttl's replace by position, or Delta's."""
    from ttl.store import write

    monkeypatch.setattr(write, "positional_enabled",
                        lambda _spark: named_write == "positional")


@pytest.mark.parametrize("named_write", ["positional", "delta"])
def test_a_key_in_a_file_without_key_hash_statistics_is_still_found_and_replaced(
        spark, table_path, named_write, monkeypatch):
    """Lookups and small batches' writes skip files by their ``key_hash`` statistics; a
    file with none (written with statistics off, as by an older writer) or one covering the
    whole range is read, never skipped: the batch finds the stored key, replaces or removes
    it, and the table keeps one row per key, whatever the file layout. The same with either
    write that names the keys: ttl's replace by position (``ttl.store.positional``) or
    Delta's (``replaceWhere``, and a MERGE for a batch that only removes keys)."""
    import pyarrow as pa

    from ttl.store.layout import key_hashes
    from ttl.store.lookup import with_delta_rs, with_spark
    from ttl.timestamps import NO_TIMESTAMP

    _named_write(spark, named_write, monkeypatch)
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"wide%d" % i, b"v", NOW, (), 0, i) for i in range(50)])
    store.spark.conf.set("spark.databricks.delta.stats.collect", "false")  # its own session
    try:
        store.apply_records([InputRecord(b"nostats", b"old", NOW, (), 0, 50)])
    finally:
        store.spark.conf.unset("spark.databricks.delta.stats.collect")
    for i in range(6):  # files of one key each: a narrow key_hash range
        version = store.apply_records([InputRecord(b"narrow%d" % i, b"n", NOW, (), 0, 51 + i)]
                                      ).version
    keys = pa.array([b"nostats", b"wide7", b"missing"], pa.binary())
    for lookup in (with_delta_rs, lambda p, k, v: with_spark(spark, p, k, v)):
        found = lookup(table_path, keys, version)
        assert sorted(found["key"].to_pylist()) == [b"nostats", b"wide7"]
    # 2 of the 8 files can hold the two keys: the write names them (replaceWhere)
    result = store.apply_records([InputRecord(b"nostats", b"new", NOW + 1, (), 0, 60),
                                  InputRecord(b"wide7", b"new", NOW + 1, (), 0, 61)])
    assert result.counts.as_dict()["upserted"] == 2
    # a file without statistics has no row count either, which an entry with a deletion
    # vector needs: the replace by position leaves such a batch to Delta's write
    assert result.write == "replace_where"
    assert result.metrics["numDeletedRows"] == 2
    entries = store.entries(at=NO_TIMESTAMP)
    assert entries[b"nostats"].value == entries[b"wide7"].value == b"new"
    rows = spark.read.format("delta").load(table_path)
    assert rows.count() == rows.select("key").distinct().count() == 57
    # a batch that only removes keys is a MERGE, whose ON clause names their hashes too
    removed = store.apply_records([InputRecord(b"wide8", None, NOW + 2, (), 0, 62),
                                   InputRecord(b"narrow3", None, NOW + 2, (), 0, 63)])
    assert removed.write == {"delta": "merge"}.get(named_write, named_write)
    assert removed.rows_deleted == 2
    assert removed.metrics[{"delta": "numTargetRowsDeleted"}.get(named_write,
                                                                 "numDeletedRows")] == 2
    log = os.path.join(table_path, "_delta_log", f"{removed.version:020d}.json")
    with open(log) as commit_file:
        (info,) = [json.loads(line)["commitInfo"] for line in commit_file
                   if "commitInfo" in line]
    hashes = key_hashes(pa.array([b"wide8", b"narrow3"], pa.binary())).to_pylist()
    assert all(re.search(rf"= {h}\b", info["operationParameters"]["predicate"])
               for h in hashes), info
    entries = store.entries(at=NO_TIMESTAMP)
    assert b"wide8" not in entries and b"narrow3" not in entries and len(entries) == 55


#: Batches that replace by position in every way the write has: a file's vector that grows
#: a second time, a file whose only row goes, removals only, more keys than a write names.
REPLACE_BATCHES = [
    [InputRecord(b"k%03d" % i, b"v0", NOW, (), 0, i) for i in range(100)],
    [InputRecord(b"solo", b"s", NOW, (), 0, 100)],  # a file of one row
    [InputRecord(b"k001", b"v1", NOW + 1, (), 0, 101),
     InputRecord(b"k002", b"v1", NOW + 1, (), 0, 102)],
    [InputRecord(b"k003", b"v2", NOW + 2, (), 0, 103),   # the file's vector grows
     InputRecord(b"k001", None, NOW + 2, (), 0, 104),    # the row batch 3 wrote
     InputRecord(b"solo", None, NOW + 2, (), 0, 105)],   # its file's only row
    [InputRecord(b"k004", None, NOW + 3, (), 0, 106)],   # removals only
    [InputRecord(b"k%03d" % i, None if i % 10 == 0 else b"v4", NOW + 4, (), 0, 200 + i)
     for i in range(10, 40)],  # more keys than a write names: the replace's
]


def change_feed(spark, path: str, version: int):
    """Delta's change data feed of ``version``: (change type, key, value) and how often."""
    from collections import Counter

    feed = (spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", version).option("endingVersion", version)
            .load(path).collect())
    return Counter((r._change_type, bytes(r.key), bytes(r.value or b"")) for r in feed)


def test_a_replace_by_position_gives_the_table_and_change_feed_of_deltas_own(
        spark, tmp_path, monkeypatch):
    """ttl's replace by position (``ttl.store.positional``) and Delta's ``replaceWhere``,
    given the same batches on two tables: the same rows, and per version the same change
    data feed (a deleted row read from the difference between a file's old and new
    deletion vectors, including a file whose vector grows a second time and a file whose
    every row goes), for a few keys (recorded as ``replaceWhere`` records its predicate)
    and for more (as ``replaceUsing`` records its columns); a replay of a committed batch
    id commits nothing."""
    from collections import Counter

    from ttl.store import write
    from ttl.timestamps import NO_TIMESTAMP

    monkeypatch.setattr(write, "WRITE_PRUNE_SHARE", 2.0)  # a write that names its keys
    batches = REPLACE_BATCHES

    def run(named_write: str) -> tuple[dict, list, list[str]]:
        path = str(tmp_path / named_write)
        monkeypatch.setattr(write, "positional_enabled",
                            lambda _spark: named_write == "positional")
        store = make_store(spark, path, lookup="delta-rs")
        kinds, changes = [], []
        for i, records in enumerate(batches):
            result = store.apply_records(records, txn=("t", i))
            kinds.append(result.write)
            changes.append(change_feed(spark, path, result.version))
        replay = store.apply_records(batches[-1], txn=("t", len(batches) - 1))
        assert replay.write == "skipped" and replay.version == result.version
        entries = {k: (e.value, e.ts) for k, e in store.entries(at=NO_TIMESTAMP).items()}
        return entries, changes, kinds

    mine, my_changes, my_kinds = run("positional")
    theirs, their_changes, their_kinds = run("delta")
    assert my_kinds == ["append", "append", "positional", "positional", "positional",
                        "positional"]
    assert their_kinds == ["append", "append", "replace_where", "replace_where", "merge",
                           "replace"]
    assert mine == theirs and len(mine) == 95 and mine[b"k002"][0] == b"v1"
    assert mine[b"k011"][0] == b"v4" and b"k020" not in mine
    assert my_changes == their_changes
    assert my_changes[3] == Counter({("delete", b"k003", b"v0"): 1,
                                     ("delete", b"k001", b"v1"): 1,
                                     ("delete", b"solo", b"s"): 1,
                                     ("insert", b"k003", b"v2"): 1})


def test_a_replace_by_position_refused_in_its_commit_leaves_the_batch_to_deltas_write(
        spark, table_path, monkeypatch, caplog):
    """Should Delta's snapshot refuse what the replace by position found (a file it does
    not list as delta-rs did, one without a row count), before anything is written, the
    batch is Delta's write instead: one commit, named by the batch line as Delta's."""
    import logging

    from ttl.errors import PositionalUnsupported
    from ttl.store import positional, write

    monkeypatch.setattr(write, "WRITE_PRUNE_SHARE", 2.0)  # Delta's would be replaceWhere
    store = make_store(spark, table_path, lookup="delta-rs")
    store.apply_records([InputRecord(b"k%d" % i, b"v", NOW, (), 0, i) for i in range(10)])

    def refuse(*_args, **_kwargs):
        raise PositionalUnsupported("planted: not in Delta's snapshot")

    monkeypatch.setattr(positional, "_deletion_vectors", refuse)
    with caplog.at_level(logging.WARNING, logger="ttl.store.write"):
        result = store.apply_records([InputRecord(b"k3", b"new", NOW + 1, (), 0, 20)])
    assert (result.write, result.by_hash) == ("replace_where", True)
    assert result.version == result.version_before + 1 and result.metrics["numDeletedRows"] == 1
    assert any("planted" in r.getMessage() for r in caplog.records)
    entries = store.entries()
    assert len(entries) == 10 and entries[b"k3"].value == b"new"


def test_an_executors_replace_by_position_gives_the_table_and_change_feed_of_deltas_own(
        spark, tmp_path, monkeypatch, caplog):
    """On the executors' path, ttl's replace of the rows the fold found (their files' name
    hashes and row indexes, ``distributed._replaced_by_position``) and Delta's
    ``replaceOn`` (a MERGE for removals only), given the same batches on two tables: the
    same rows, and per version the same change data feed (a file whose vector grows a
    second time, a file whose every row goes, removals only, a put expired on arrival); a
    replay of a committed batch id commits nothing. Should a position name no file of the
    version (planted: a wrong file name hash), nothing is committed by position and the
    batch is Delta's write, with one warning line."""
    import logging
    from collections import Counter

    from pyspark.sql import functions as F

    from ttl.store import distributed, write
    from ttl.store.fold import records_table
    from ttl.timestamps import NO_TIMESTAMP

    positions = distributed.Spread.positions
    batches = [
        *REPLACE_BATCHES,
        # at a wall clock past every stored row's expiry: a put expired on arrival removes
        # the key's row (an expiry), another is updated
        [InputRecord(b"k050", b"v5", NOW, (), 0, 300),
         InputRecord(b"k051", b"v5", NOW + 2 * TTL, (), 0, 301)],
    ]

    def run(name: str) -> tuple[dict, list, list[str]]:
        path = str(tmp_path / name)
        monkeypatch.setattr(write, "positional_enabled", lambda _spark: name != "delta")
        monkeypatch.setattr(distributed.Spread, "positions", positions if name != "refused"
                            else lambda spread: positions(spread).withColumn(
                                "stored_file", F.lit(12345).cast("long")))
        store = make_store(spark, path)
        kinds, changes = [], []
        for i, records in enumerate(batches):
            if i == len(batches) - 1:
                store.wall_clock.set(NOW + 2 * TTL)
            frame = spark.createDataFrame(records_table(records))
            result = store.apply_frame(frame, txn=("t", i), metadata=lambda figures: {})
            kinds.append(result.write)
            changes.append(change_feed(spark, path, result.version))
        frame = spark.createDataFrame(records_table(batches[-1]))
        replay = store.apply_frame(frame, txn=("t", len(batches) - 1),
                                   metadata=lambda figures: {})
        assert not replay.applied and replay.version == result.version
        entries = {k: (e.value, e.ts) for k, e in store.entries(at=NO_TIMESTAMP).items()}
        return entries, changes, kinds

    mine, my_changes, my_kinds = run("positional")
    theirs, their_changes, their_kinds = run("delta")
    with caplog.at_level(logging.WARNING, logger="ttl.store.distributed"):
        refused, refused_changes, refused_kinds = run("refused")
    assert my_kinds == ["append", "append", *["positional"] * 5]
    assert their_kinds == refused_kinds == ["append", "append", "replace", "replace", "merge",
                                            "replace", "replace"]
    assert sum("has the name hash 12345" in r.getMessage() for r in caplog.records) == 5
    assert mine == theirs == refused and len(mine) == 94 and mine[b"k002"][0] == b"v1"
    assert mine[b"k011"][0] == b"v4" and b"k020" not in mine and b"k050" not in mine
    assert mine[b"k051"][0] == b"v5"
    assert my_changes == their_changes == refused_changes
    assert my_changes[-1] == Counter({("delete", b"k050", b"v0"): 1,
                                      ("insert", b"k051", b"v5"): 1,
                                      ("delete", b"k051", b"v0"): 1})
    assert my_changes[3] == Counter({("delete", b"k003", b"v0"): 1,
                                     ("delete", b"k001", b"v1"): 1,
                                     ("delete", b"solo", b"s"): 1,
                                     ("insert", b"k003", b"v2"): 1})


@pytest.mark.parametrize("path", ["delta-rs", "spark", "spark-join", "executors",
                                  "executors-by-position"])
def test_a_stored_row_sharing_a_batch_keys_hash_is_left_as_it_is(spark, table_path, path,
                                                                  monkeypatch):
    """A replace deletes stored rows by ``key_hash`` alone only when the lookup found no
    row of another key with a batch key's hash (``layout.hash_identifies_keys``). Such a
    collision, planted here as a row of key ``z`` carrying ``a``'s ``key_hash``, makes the
    replace match the hash and the key: updating and removing ``a`` leaves ``z`` as it is,
    on the driver path (either reader; ``spark-join``: batches of more keys than its filter
    takes, so its broadcast semi-join) and on the executors' (with Delta's replace, and
    with ttl's by the positions its fold found)."""
    from pyspark.sql import functions as F

    from ttl.store import write
    from ttl.store.fold import records_table

    monkeypatch.setattr(write, "WRITE_PRUNE_SHARE", -1.0)  # the replace, never replaceWhere
    by_position = path == "executors-by-position"
    monkeypatch.setattr(write, "positional_enabled", lambda _spark: by_position)
    kind = "positional" if by_position else "replace"
    from itertools import islice

    from ttl.store.lookup import LOOKUP_IN_LIST

    store = make_store(spark, table_path,
                       lookup="spark" if path.startswith("spark") else "delta-rs")
    fillers = iter(range(10**6))

    def apply(records):
        if path == "spark-join":  # new keys, appended to the batch
            records = [*records, *(InputRecord(b"new-%d" % i, b"f", NOW, (), 1, i)
                                   for i in islice(fillers, LOOKUP_IN_LIST + 1))]
        if not path.startswith("executors"):
            return store.apply_records(records)
        frame = spark.createDataFrame(records_table(records))
        return store.apply_frame(frame, metadata=lambda figures: {})

    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0),
                         InputRecord(b"b", b"1", NOW, (), 0, 1)])
    plain = apply([InputRecord(b"b", b"2", NOW + 1, (), 0, 2)])
    assert (plain.write, plain.by_hash, plain.metrics["numDeletedRows"]) == (kind, True, 1)
    table = spark.read.format("delta").load(table_path)
    (table.where(F.col("key") == F.lit(b"a"))
     .withColumn("key", F.lit(b"z")).withColumn("value", F.lit(b"planted"))
     .write.format("delta").mode("append").save(table_path))
    updated = apply([InputRecord(b"a", b"2", NOW + 2, (), 0, 3)])
    assert (updated.write, updated.by_hash) == (kind, False)
    assert updated.metrics["numDeletedRows"] == 1  # a's row, not z's
    removed = apply([InputRecord(b"a", None, NOW + 3, (), 0, 4),
                     InputRecord(b"b", b"3", NOW + 3, (), 0, 5)])
    assert (removed.write, removed.by_hash, removed.rows_deleted) == (kind, False, 1)
    rows = spark.read.format("delta").load(table_path).select("key", "value").collect()
    named = sorted((bytes(r.key), bytes(r.value)) for r in rows
                   if not bytes(r.key).startswith(b"new-"))
    assert named == [(b"b", b"3"), (b"z", b"planted")]
    assert len(rows) == len({bytes(r.key) for r in rows})


@pytest.mark.parametrize("named_write", ["positional", "delta"])
def test_a_small_batchs_write_names_its_keys_only_when_their_hashes_do_not_tell_them_apart(
        spark, table_path, monkeypatch, named_write):
    """A small batch's ``replaceWhere`` names only the changed keys' hashes when the lookup
    proved that they tell the keys' rows apart (``layout.hash_identifies_keys``), and no
    key then reaches the Delta log. With a row of key ``z`` planted with ``a``'s
    ``key_hash`` (a collision), the predicate names the keys too: updating and removing
    ``a`` leaves ``z`` as it is. The same for ttl's replace by position, which finds the
    rows by the same predicate and records it."""
    import pyarrow as pa
    from pyspark.sql import functions as F

    from ttl.store import write
    from ttl.store.layout import key_hashes

    monkeypatch.setattr(write, "WRITE_PRUNE_SHARE", 2.0)  # replaceWhere whenever it may
    _named_write(spark, named_write, monkeypatch)
    kind = {"delta": "replace_where"}.get(named_write, named_write)
    store = make_store(spark, table_path, lookup="delta-rs")

    def predicate(version: int) -> str:
        log = os.path.join(table_path, "_delta_log", f"{version:020d}.json")
        with open(log) as commit_file:
            (info,) = [json.loads(line)["commitInfo"] for line in commit_file
                       if "commitInfo" in line]
        return info["operationParameters"]["predicate"]

    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0),
                         InputRecord(b"b", b"1", NOW, (), 0, 1)])
    plain = store.apply_records([InputRecord(b"b", b"2", NOW + 1, (), 0, 2)])
    assert (plain.write, plain.by_hash, plain.metrics["numDeletedRows"]) == (
        kind, True, 1)
    (b_hash,) = key_hashes(pa.array([b"b"], pa.binary())).to_pylist()
    assert predicate(plain.version) == f"key_hash = {b_hash}"
    store.apply_records([InputRecord(b"c", b"1", NOW + 1, (), 0, 10)])
    both = store.apply_records([InputRecord(b"c", None, NOW + 2, (), 0, 11),
                                InputRecord(b"b", b"2b", NOW + 2, (), 0, 12)])
    assert (both.write, both.by_hash, both.rows_deleted) == (kind, True, 1)
    assert both.metrics["numDeletedRows"] == 2  # c's row and b's old one
    assert "key IN" not in predicate(both.version)
    assert store.get(b"c") is None and store.get(b"b") == b"2b"
    table = spark.read.format("delta").load(table_path)
    (table.where(F.col("key") == F.lit(b"a"))
     .withColumn("key", F.lit(b"z")).withColumn("value", F.lit(b"planted"))
     .write.format("delta").mode("append").save(table_path))
    updated = store.apply_records([InputRecord(b"a", b"2", NOW + 2, (), 0, 3)])
    assert (updated.write, updated.by_hash) == (kind, False)
    assert updated.metrics["numDeletedRows"] == 1  # a's row, not z's
    assert f"key IN (X'{b'a'.hex()}')" in predicate(updated.version)
    removed = store.apply_records([InputRecord(b"a", None, NOW + 3, (), 0, 4),
                                   InputRecord(b"b", b"3", NOW + 3, (), 0, 5)])
    assert (removed.write, removed.by_hash, removed.rows_deleted) == (
        kind, False, 1)
    rows = spark.read.format("delta").load(table_path).select("key", "value").collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in rows) == [(b"b", b"3"),
                                                                    (b"z", b"planted")]


def test_optimize_by_key_hash_gives_files_a_small_batch_can_skip(spark, table_path):
    """``maintenance.cluster_by = "key_hash"``: the scheduled OPTIMIZE orders the files by
    ``key_hash`` into files of at most ``optimize_file_bytes``, so each covers a narrow
    range (a key falls in one file's, or two at a boundary), where every append spans the
    whole range; a small batch's write then names its keys and Delta reads only their
    files, with the table's rows unchanged."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from ttl import eviction
    from ttl.store.lookup import files_to_read
    from ttl.timestamps import NO_TIMESTAMP

    def files() -> pa.Table:
        return pa.table(DeltaTable(table_path).get_add_actions(flatten=True))

    def spread(table: pa.Table) -> int:  # the most files' ranges one stored key falls in
        return max(files_to_read(table, pa.array([b"k%04d" % i], pa.binary()))
                   for i in range(0, 2000, 50))

    store = make_store(spark, table_path)
    for batch in range(4):
        store.apply_records([InputRecord(b"k%04d" % i, b"v%d" % i, NOW, (), 0, i)
                             for i in range(batch * 500, batch * 500 + 500)])
    before = store.entries(at=NO_TIMESTAMP)
    assert spread(files()) == files().num_rows == 4  # one file per append, each wide
    eviction.optimize(store, "key_hash", file_bytes=4096)
    after = files()
    assert after.num_rows > 4 and spread(after) <= 2  # narrow: two at a boundary
    assert store.entries(at=NO_TIMESTAMP) == before
    result = store.apply_records([InputRecord(b"k0007", b"new", NOW + 1, (), 0, 9000),
                                  InputRecord(b"k1234", None, NOW + 1, (), 0, 9001)])
    assert result.write == "positional"  # ttl's replace by position of the named keys
    entries = store.entries(at=NO_TIMESTAMP)
    assert entries[b"k0007"].value == b"new" and b"k1234" not in entries
    assert len(entries) == 1999
    rows = spark.read.format("delta").load(table_path)
    assert rows.count() == rows.select("key").distinct().count() == 1999
    with pytest.raises(ValueError, match="maintenance.cluster_by"):
        eviction.optimize(store, "key")


def _stored_in_four_appends(spark, table_path) -> DeltaStore:
    """2,000 keys in four appends, their expiries spread over 2,000 s."""
    store = make_store(spark, table_path, ttl=3_600_000)
    for batch in range(4):
        store.apply_records([InputRecord(b"k%04d" % i, b"v%d" % i, NOW + i * 1_000, (), 0, i)
                             for i in range(batch * 500, batch * 500 + 500)])
    return store


def test_optimize_both_groups_files_by_expiry_and_orders_each_group_by_key_hash(
        spark, table_path):
    """``maintenance.cluster_by = "both"``: the rewrite puts the rows in G groups by
    ``expires_at`` and orders each by ``key_hash``, so a sweep that evicts the earliest
    tenth reads the files of one group, and a key falls in about one file per group (the
    appends: every file, for both). No row changes and the change data feed has nothing
    for it; it is an OPTIMIZE without engine metadata, like the Z-orders."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from ttl import delta_log
    from ttl.store import ordering
    from ttl.store.lookup import files_to_read
    from ttl.timestamps import NO_TIMESTAMP

    def files() -> pa.Table:
        return pa.table(DeltaTable(table_path).get_add_actions(flatten=True))

    def key_spread(table: pa.Table) -> int:  # the most files one stored key falls in
        return max(files_to_read(table, pa.array([b"k%04d" % i], pa.binary()))
                   for i in range(0, 2000, 50))

    def sweep_reads(table: pa.Table, t: int) -> int:  # files whose expiry range reaches t
        return sum(1 for low in table.column("min.expires_at").to_pylist() if low <= t)

    store = _stored_in_four_appends(spark, table_path)
    before = store.entries(at=NO_TIMESTAMP)
    tenth = NOW + 3_600_000 + 199_000  # the first 200 keys' expiry
    appended = files()
    assert key_spread(appended) == 4 and sweep_reads(appended, tenth) == 1  # appends: by time
    done = ordering.rewrite(spark, table_path, file_bytes=2048, keys=1)
    after = files()
    count, groups = after.num_rows, done["groups"]
    assert done["files_after"] == count > 20 and groups == ordering.expiry_groups(count, 1) > 3
    assert sweep_reads(after, tenth) <= count // groups + 2, (sweep_reads(after, tenth), count)
    assert key_spread(after) <= 2 * groups + 1, (key_spread(after), groups)
    assert store.entries(at=NO_TIMESTAMP) == before
    info = delta_log.latest_commit(spark, table_path)
    assert (info.version, info.operation, info.metadata) == (done["version"], "OPTIMIZE", None)
    changes = (spark.read.format("delta").option("readChangeFeed", "true")
               .option("startingVersion", info.version).load(table_path))
    assert changes.count() == 0
    swept = eviction_sweep(store, tenth)
    assert swept == 200
    result = store.apply_records([InputRecord(b"k0500", None, NOW + 600_000, (), 0, 9000),
                                  InputRecord(b"k1234", b"new", NOW + 1_300_000, (), 0, 9001)])
    entries = store.entries(at=NO_TIMESTAMP)
    assert entries[b"k1234"].value == b"new" and b"k0500" not in entries, result.write
    rows = spark.read.format("delta").load(table_path)
    assert rows.count() == rows.select("key").distinct().count() == len(entries) == 1799


def eviction_sweep(store, t: int) -> int:
    from ttl import eviction

    return eviction.sweep(store, "wall", t).evicted


def test_commits_landing_during_the_both_rewrite_are_kept(spark, table_path, monkeypatch):
    """The rewrite is pinned to one snapshot and removes exactly the files it read. Commits
    that land while it writes (here an operator's INSERT and UPDATE, made as the rewrite
    orders its rows): the appended file is not among those it removes, so the row stays
    (Delta lets a blind append pass); the UPDATE removed a file it read, so Delta refuses
    its commit and the rewrite runs again from the new snapshot. An overwrite of the older
    snapshot would have lost the inserted row and put back the updated row's old value."""
    from ttl import eviction
    from ttl.store import ordering
    from ttl.timestamps import NO_TIMESTAMP

    store = _stored_in_four_appends(spark, table_path)
    real, calls, meanwhile = ordering.ordered, [], []

    def with_commits_meanwhile(frame, files, bounds):
        calls.append(files)
        for sql in meanwhile:
            spark.sql(sql)
        meanwhile.clear()
        return real(frame, files, bounds)

    monkeypatch.setattr(ordering, "ordered", with_commits_meanwhile)
    meanwhile.append(f"INSERT INTO delta.`{table_path}` SELECT X'6f70', X'76', {NOW}, "
                     "CAST(array() AS ARRAY<STRUCT<key: STRING, value: BINARY>>), "
                     f"{NOW + 3_600_000}, {NOW}, xxhash64(X'6f70'), NULL")  # op = v
    eviction.optimize(store, "both", file_bytes=2048)
    assert len(calls) == 1  # the append passed
    assert store.entries(at=NO_TIMESTAMP)[b"op"].value == b"v"
    meanwhile.append(f"UPDATE delta.`{table_path}` SET value = X'6e6577' "
                     "WHERE key = X'6b30303031'")  # k0001 = new
    eviction.optimize(store, "both", file_bytes=2048)
    assert len(calls) == 3  # refused once (the UPDATE), run again
    entries = store.entries(at=NO_TIMESTAMP)
    assert entries[b"op"].value == b"v" and entries[b"k0001"].value == b"new"
    rows = spark.read.format("delta").load(table_path)
    assert rows.count() == rows.select("key").distinct().count() == len(entries) == 2001


@pytest.mark.parametrize("key_filter", ["bloom", "every-row", "join"])
def test_the_executors_fold_keeps_only_the_stored_rows_of_its_batchs_keys(spark, table_path,
                                                                          key_filter):
    """The executors' fold finds its batch's stored rows with a Bloom filter of the batch's
    key hashes (``KEY_FILTER_ENABLED``) or a join with them. The filter keeps every row of
    the batch's keys and about 1% of the others (``KEY_FILTER_FPP``; at 1, every row).
    Whichever, the partitions drop the rows of hashes they have no input of, so the batch
    finds, replaces and removes exactly its keys' rows, and a batch of new keys is still
    an append. A false-positive rate outside (0, 1] is refused by the setting's name."""
    from ttl.errors import ConfigError
    from ttl.names import KEY_FILTER_ENABLED, KEY_FILTER_FPP
    from ttl.store import distributed
    from ttl.store.fold import records_table

    store = make_store(spark, table_path, lookup="delta-rs")
    store.spark.conf.set(KEY_FILTER_ENABLED, str(key_filter != "join").lower())
    store.spark.conf.set(KEY_FILTER_FPP, "1" if key_filter == "every-row" else "0.01")
    store.apply_records([InputRecord(b"k%02d" % i, b"1", NOW, (), 0, i) for i in range(40)])
    if key_filter != "join":  # every row of the three keys, and of the others none or all
        three = distributed.tagged_inputs(store.spark.createDataFrame(records_table(
            [InputRecord(b"k%02d" % i, b"x", NOW, (), 0, i) for i in (1, 2, 3)])))
        table = store.spark.read.format("delta").load(table_path)
        kept = table.where(distributed.key_filter(store.spark, three)).select("key")
        keys = {bytes(r.key) for r in kept.collect()}
        assert {b"k01", b"k02", b"k03"} <= keys
        assert len(keys) == 40 if key_filter == "every-row" else len(keys) <= 5
    seen = []

    def apply(records):
        return store.apply_frame(spark.createDataFrame(records_table(records)),
                                 metadata=lambda figures: seen.append(figures) or {})

    changed = apply([InputRecord(b"k03", b"2", NOW + 1, (), 0, 100),
                     InputRecord(b"k07", None, NOW + 1, (), 0, 101),
                     InputRecord(b"new", b"n", NOW + 1, (), 0, 102)])
    assert (seen[-1].stored, seen[-1].upserted, seen[-1].deleted) == (2, 2, 1)
    assert changed.metrics["numDeletedRows"] == 2  # k03's old row and k07's
    appended = apply([InputRecord(b"new2", b"n", NOW + 2, (), 0, 103)])
    assert (appended.write, seen[-1].stored) == ("append", 0)
    rows = spark.read.format("delta").load(table_path).select("key", "value").collect()
    stored = {bytes(r.key): bytes(r.value) for r in rows}
    assert len(rows) == len(stored) == 41
    assert (stored[b"k03"], stored[b"new"], stored[b"new2"], stored[b"k04"]) == (
        b"2", b"n", b"n", b"1")
    assert b"k07" not in stored
    store.spark.conf.set(KEY_FILTER_FPP, "1.5")
    with pytest.raises(ConfigError, match=re.escape(KEY_FILTER_FPP)):
        apply([InputRecord(b"k05", b"3", NOW + 3, (), 0, 104)])
    assert store.get(b"k05") == b"1"
