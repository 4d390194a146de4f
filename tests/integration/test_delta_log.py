"""``ttl.delta_log`` (the one reader of the log), ``ttl.timestamps`` (saturating expiry in
Python and as a Spark column, held to each other) and ``ttl status`` built on them."""

from __future__ import annotations

import pytest

from tests.integration.test_eviction import make_store, recs
from tests.support import age_log
from ttl import app, commands, commit, delta_log, eviction
from ttl.clock import FixedClock
from ttl.config import from_dict
from ttl.names import OP_SWEEP
from ttl.timestamps import INT64_MAX, INT64_MIN, expiry, expiry_column

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def test_expiry_column_equals_the_python_rule_at_the_int64_edges(spark):
    cases = [(ts, ttl) for ts in (INT64_MIN, INT64_MIN + 1, -1, 0, NOW, INT64_MAX - 1_000,
                                  INT64_MAX - 1, INT64_MAX)
             for ttl in (None, 1, 1_000, 86_400_000, INT64_MAX)]
    frame = spark.createDataFrame(cases, "ts bigint, ttl bigint")
    got = {(r.ts, r.ttl): r.e for r in
           frame.select("ts", "ttl", expiry_column("ts", "ttl").alias("e")).collect()}
    assert got == {(ts, ttl): expiry(ts, ttl) for ts, ttl in cases}
    assert got[(INT64_MAX - 1_000, 86_400_000)] == INT64_MAX  # saturates, never wraps


def test_log_reads_find_engine_commits_by_op_and_exact_id_and_skip_others(spark, table_path):
    store = make_store(spark, table_path, ttl=1_000)
    store.apply_records(recs((b"a", b"v", NOW - 500), (b"b", b"v", NOW)),
                        metadata={"input_offsets": {"0": 2}})
    first = eviction.sweep(store, "wall", NOW + 600)
    spark.sql(f"UPDATE delta.`{table_path}` SET value = X'00' WHERE key = X'62'")  # operator
    second = eviction.sweep(store, "wall", NOW + 10_000)
    latest = delta_log.latest_version(spark, table_path)
    assert latest == second.version and first.version < latest
    assert (first.evicted, second.evicted) == (1, 1)
    # by op: the latest sweep, never the operator's UPDATE in between
    found = delta_log.last_engine_commit(spark, table_path, op=OP_SWEEP)
    assert found.version == second.version and found.metadata["t"] == NOW + 10_000
    assert found.metric("numDeletedRows") == 1
    # by exact id: a prefix of the id matches nothing (the old substring search would)
    by_id = delta_log.find_commit(spark, table_path, op=OP_SWEEP, key="sweep_id",
                                  value=first.sweep_id, since=0)
    assert by_id.version == first.version
    assert delta_log.find_commit(spark, table_path, op=OP_SWEEP, key="sweep_id",
                                 value=first.sweep_id[:8], since=0) is None
    assert delta_log.find_commit(spark, table_path, op=OP_SWEEP, key="sweep_id",
                                 value=first.sweep_id, since=first.version) is None
    # a metadata key: the batch's recorded input offsets
    offsets = delta_log.last_engine_commit(spark, table_path, having="input_offsets")
    assert offsets.metadata["input_offsets"] == {"0": 2}
    # others' commits carry no engine metadata
    meta = delta_log.engine_metadata(spark, table_path, 0, latest)
    assert meta[second.version - 1] == {} and meta[first.version]["op"] == OP_SWEEP
    assert delta_log.commit_at(spark, table_path, second.version - 1).operation == "UPDATE"
    assert delta_log.commit_at(spark, table_path, latest + 1) is None
    assert delta_log.commit_info(spark, table_path, latest + 1) is None
    assert delta_log.latest_commit(spark, table_path).metric("numDeletedRows") == 1
    assert delta_log.max_stream_time(spark, table_path) == NOW
    assert commit.decode("not json") is None


def test_status_reports_entries_sweeps_lease_and_dead_letters(spark, table_path):
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "1s"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "stream": {"checkpoint": "unused"}})
    wall = FixedClock(NOW)
    store = make_store(spark, table_path, ttl=1_000, wall=wall)
    store.apply_records(recs((b"gone", b"v", NOW - 800), (b"due", b"v", NOW - 300),
                             (b"live", b"v", NOW), (b"bad", b"v", NOW, (("ttl.ttl", b"x"),))))
    wall.set(NOW + 500)
    eviction.sweep(store, "wall")  # removes "gone" (expired at NOW + 200)
    wall.set(NOW + 800)  # "due" expired at NOW + 700, not swept yet
    runtime = app.App(conf, spark=spark, wall_clock=store.wall_clock)
    out = commands.status(runtime)
    assert out["live entries"] == 1 and out["expired, not yet swept"] == 1
    assert out["dead letters"] == 1 and out["lease"] == "free"
    assert out["stream time"] == NOW
    assert out["last sweep"]["evicted"] == 1 and out["last sweep"]["t"] == NOW + 500
    assert out["table version"] == out["last sweep"]["version"]
    assert out["changelog lag (versions)"].startswith("unknown")  # embedded: not running


@pytest.mark.parametrize("name", ["ConcurrentAppendException", "ConcurrentDeleteReadException",
                                  "ConcurrentDeleteDeleteException", "MetadataChangedException",
                                  "ConcurrentTransactionException", "ProtocolChangedException",
                                  "ConcurrentWriteException"])
def test_each_conflict_the_jvm_throws_is_retried(spark, name):
    """Issue 31, scenario 8: each of Delta's conflict exceptions, thrown by the JVM (its
    ``io.delta.exceptions`` class), reaches Python as the class ``delta_log.conflicts``
    matches, and the operation runs again; ConcurrentWriteException used to fail it. Run
    alone (no import of delta before), the first case shows that ``retrying`` installs
    delta-spark's conversion itself: the first conflict of a process was a bare
    Py4JJavaError, not retried."""
    jvm = spark.sparkContext._jvm
    thrown = []

    def action() -> str:
        if not thrown:
            thrown.append(name)
            conflict = getattr(jvm.io.delta.exceptions, name)("a concurrent commit won")
            jvm.scala.util.Failure(conflict).get()  # throws it, as a commit would
        return "committed"

    assert delta_log.retrying(action, what="test", backoff_s=0) == ("committed", 1)


def test_stream_time_is_recovered_from_the_floor_and_the_commits_after_it(
        spark, table_path, monkeypatch):
    """A store's start-up reads the commits after the version the stream-time floor covers,
    never the whole log; the floor is computed from the log, so a writer whose stream time
    is behind (a rebased commit, a stale process) cannot lower what is recovered."""
    from ttl.clock import stream_time_floor
    from ttl.store import store as store_module

    monkeypatch.setattr(store_module, "FLOOR_EVERY", 3)
    store = make_store(spark, table_path, ttl=1_000)
    store.raise_stream_time_floor(delta_log.latest_version(spark, table_path))
    assert stream_time_floor(delta_log.properties(spark, table_path)) == (None, None)  # new
    for i in range(3):
        store.apply_records(recs((b"k%d" % i, b"v", NOW + i * 1_000)))
    store.raise_stream_time_floor(delta_log.latest_version(spark, table_path))
    floor, through = stream_time_floor(delta_log.properties(spark, table_path))
    assert (floor, through) == (NOW + 2_000, through) and through is not None
    # a stale writer's commit after the floor: its lower stream time changes nothing
    stale = make_store(spark, table_path, ttl=1_000)
    stale.stream_time = type(stale.stream_time)(NOW - 50_000)
    stale.apply_records(recs((b"late", b"v", NOW - 60_000)))
    # the raise is rate-limited by versions: the next commit does not make another
    before = delta_log.latest_version(spark, table_path)
    store.raise_stream_time_floor(before)
    assert delta_log.latest_version(spark, table_path) == before
    store.apply_records(recs((b"k9", b"v", NOW + 9_000)),
                        metadata={"input_offsets": {"0": 7}})
    store.apply_records(recs((b"k8", b"v", NOW)))
    # bounded: the recovery reads commit files after `through`, never the whole history;
    # so does the search for the recorded input position
    monkeypatch.setattr(delta_log, "_history", lambda *a, **k: pytest.fail("whole log read"))
    reopened = make_store(spark, table_path, ttl=1_000)
    assert reopened.stream_time.value == NOW + 9_000
    position = delta_log.last_engine_commit(spark, table_path, having="input_offsets")
    assert position.metadata["input_offsets"] == {"0": 7}
    # a floor raised later covers the stale commit as well
    monkeypatch.setattr(store_module, "FLOOR_EVERY", 1)
    reopened.raise_stream_time_floor(delta_log.latest_version(spark, table_path))
    assert stream_time_floor(delta_log.properties(spark, table_path))[0] == NOW + 9_000
    assert make_store(spark, table_path, ttl=1_000).stream_time.value == NOW + 9_000


def test_the_log_clean_up_keeps_the_input_position_and_stream_time_and_waits_for_publication(
        spark, table_path, monkeypatch, caplog):
    """The scheduled clean-up removes commits older than its retention, never unpublished
    ones, and a start-up after it still finds the input position (with the batch a replay
    may repeat) and the stream time those commits recorded, without reading the history."""
    import logging
    import os
    import time

    from ttl import schedule
    from ttl.errors import LogCleanupRefused
    from ttl.input_position import Recorded

    now = int(time.time() * 1000)
    store = make_store(spark, table_path, ttl=10 * 86_400_000, wall=FixedClock(now))
    for i in range(4):
        store.apply_records(recs((b"k%d" % i, b"v", now + i)), metadata={
            "input_offsets": {"0": 10 + i, "1": 20 + i}, "whole_position": True,
            "query_id": "q", "batch_id": i})
    store.apply_records(recs((b"late", b"v", now - 5_000)))  # no position, older time
    delta_log._jvm_log(spark, table_path).checkpoint()
    checkpointed = delta_log.latest_version(spark, table_path)
    age_log(table_path, 3 * 3_600)
    dead = store.dead_letter_path  # its log is cleaned up too
    spark.sql(f"ALTER TABLE delta.`{dead}` SET TBLPROPERTIES ('x' = '1')")
    delta_log._jvm_log(spark, dead).checkpoint()
    age_log(dead, 3 * 3_600)
    conf = from_dict({"store": {"name": "ev", "path": table_path},
                      "kafka": {"input_topic": "i", "changelog_topic": "c"},
                      "stream": {"checkpoint": "unused"},
                      "maintenance": {"log_retention": "2h", "publisher_max_lag": "30m",
                                      "drill_window": "1h"}})
    published: list[int | None] = [None]
    jobs = schedule.StoreJobs(store, conf, published=lambda: published[0])
    with pytest.raises(LogCleanupRefused, match="unknown"):
        eviction.clean_log(store, conf.maintenance.log_retention_ms, None)
    published[0] = 1  # the changelog has version 1, written 3 h ago: still needed
    with pytest.raises(LogCleanupRefused, match="version 1"):
        eviction.clean_log(store, conf.maintenance.log_retention_ms, published[0])
    with caplog.at_level(logging.WARNING, logger="ttl.schedule"):
        jobs.clean_log()  # the scheduled job waits: one line each hour, no traceback
    refused = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(refused) == 1 and refused[0].exc_info is None
    assert delta_log.commit_at(spark, table_path, 0) is not None
    published[0] = checkpointed  # all published: the scheduled job cleans
    jobs.clean_log()
    assert delta_log.commit_info(spark, table_path, 0) is None  # removed
    assert delta_log.commit_info(spark, table_path, checkpointed) is not None  # its checkpoint's
    assert not os.path.exists(os.path.join(table_path, "_delta_log", f"{0:020d}.json"))
    assert not os.path.exists(os.path.join(dead, "_delta_log", f"{0:020d}.json"))
    assert spark.read.format("delta").load(dead).count() == 0  # still a table
    # what the removed commits recorded, from the floor written first; no history read
    monkeypatch.setattr(delta_log, "_history", lambda *a, **k: pytest.fail("whole log read"))
    assert delta_log.recorded_position(spark, table_path) == Recorded(
        {"0": 13, "1": 23}, ("q", 3), False)
    reopened = make_store(spark, table_path, ttl=10 * 86_400_000, wall=FixedClock(now))
    assert reopened.stream_time.value == now + 3
    assert reopened.entries(at=now).keys() >= {b"k0", b"k3", b"late"}
    # a batch after it: its position comes first, the floor's fills in the rest
    reopened.apply_records(recs((b"k9", b"v", now + 9)), metadata={
        "input_offsets": {"0": 30}, "query_id": "q", "batch_id": 9})
    assert delta_log.recorded_position(spark, table_path) == Recorded(
        {"0": 30, "1": 23}, ("q", 9), False)


def test_the_floor_is_raised_only_past_its_own_commit_and_never_trusts_another_tables(
        spark, table_path, monkeypatch):
    """A raise with nothing new since the floor makes no commit (an idle store would make
    one at every clean-up and every hour), a job without a version lists the log only when
    the time's rule is due, and a floor copied from another table's log (a version past
    this one's) is replaced, not taken for this table's."""
    import json

    from ttl.names import PROP_INPUT_POSITION
    from ttl.store import layout
    from ttl.store import store as store_module

    store = make_store(spark, table_path, ttl=1_000)
    store.apply_records(recs((b"a", b"v", NOW)), metadata={
        "input_offsets": {"0": 3}, "whole_position": True, "query_id": "q", "batch_id": 1})
    store.raise_stream_time_floor(None, now=True)
    raised = delta_log.latest_version(spark, table_path)
    store.raise_stream_time_floor(None, now=True)  # only the floor's own commit since
    assert delta_log.latest_version(spark, table_path) == raised
    monkeypatch.setattr(delta_log, "latest_version",
                        lambda *a, **k: pytest.fail("listed while not due"))
    store.raise_stream_time_floor(None)  # not due by time: nothing read
    monkeypatch.undo()
    foreign = json.loads(delta_log.properties(spark, table_path)[PROP_INPUT_POSITION])
    foreign.update(through=raised + 5, position={"0": 99})  # another table's version
    layout.set_properties(spark, table_path, {PROP_INPUT_POSITION: json.dumps(foreign)})
    copied = delta_log.latest_version(spark, table_path)
    assert delta_log.recorded_position(spark, table_path).position == {"0": 3}  # ignored
    monkeypatch.setattr(store_module, "FLOOR_EVERY", 1)
    store.raise_stream_time_floor(None, now=True)
    assert delta_log.recorded_position(spark, table_path).position == {"0": 3}
    kept = json.loads(delta_log.properties(spark, table_path)[PROP_INPUT_POSITION])
    assert kept["position"] == {"0": 3} and kept["through"] == copied


def test_a_table_read_at_a_version_lists_its_files_once_and_honours_deletion_vectors(
        spark, table_path):
    """``delta_log.table_at``: the rows of the version asked for (an older one too), less
    those a deletion vector removed, as a read through the path gives them; a query that
    holds it is planned without reading the log's state (a read through the path does);
    and it belongs to the session it was asked for, whichever is active."""
    from pyspark.sql import functions as F

    spark.range(100).coalesce(1).selectExpr("id", "id % 7 AS k").write.format("delta").save(
        table_path)
    spark.sql(f"DELETE FROM delta.`{table_path}` WHERE id < 10")
    latest = delta_log.latest_version(spark, table_path)
    assert int(delta_log.commit_info(spark, table_path, latest).metrics[
        "numDeletionVectorsAdded"]) == 1  # a deletion vector, not a file rewritten
    other = spark.newSession()
    other.createDataFrame([(1,)], "x int")  # now the thread's active session
    now = delta_log.table_at(spark, table_path, latest)
    assert now._jdf.sparkSession().equals(spark._jsparkSession)
    through_path = spark.read.format("delta").option("versionAsOf", latest).load(table_path)
    assert now.schema == through_path.schema
    assert sorted(now.collect()) == sorted(through_path.collect())
    assert sorted(r.id for r in now.collect()) == list(range(10, 100))
    assert delta_log.table_at(spark, table_path, 0).count() == 100  # before the DELETE
    tracker = spark.sparkContext.statusTracker()
    spark.sparkContext.setJobGroup("table-at", "planning", interruptOnCancel=False)
    try:
        joined = now.join(F.broadcast(now.select("k").distinct()), "k", "left_semi")
        joined.explain(mode="simple")  # planned, not run
        assert tracker.getJobIdsForGroup("table-at") == []  # nothing read to plan it
        assert joined.count() == 90
    finally:
        spark.sparkContext.setJobGroup("", "", interruptOnCancel=False)
