"""Eviction on real Spark, Delta and Kafka: boundaries, stream time, races, schedules."""

from __future__ import annotations

import json
import os
import threading
import uuid

import pytest

from tests.support import clients, consume_all, rebuild_from_changelog, wait_until
from ttl import commands, delta_log, delta_rs, eviction, schedule
from ttl.app import App
from ttl.changelog import topic
from ttl.changelog.publisher import Publisher
from ttl.clock import FixedClock, WallClock
from ttl.config import ChangelogConfig, KafkaConfig, StoreConfig, from_dict
from ttl.expiry_floor import NEVER
from ttl.lease import Lease
from ttl.record import InputRecord
from ttl.store import DeltaStore
from ttl.timestamps import INT64_MAX

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000
TTL = 60_000


def make_store(spark, path, ttl=TTL, clock="wall", wall=None) -> DeltaStore:
    return DeltaStore(spark, StoreConfig(name="ev", path=path, ttl=ttl), clock=clock,
                      wall_clock=wall or FixedClock(NOW))


def recs(*items) -> list[InputRecord]:
    """(key, value, ts[, extra headers]) -> records with increasing offsets."""
    out = []
    for i, item in enumerate(items):
        key, value, ts, *hdrs = item
        out.append(InputRecord(key, value, -1, (("ttl.ts", str(ts).encode()), *(hdrs or [()])[0]),
                               0, i))
    return out


def keys(store, at=-(2**63)) -> set[bytes]:
    return set(store.entries(at=at))


def test_boundary_negative_timestamps_no_ttl_and_per_record_ttl(spark, table_path):
    store = make_store(spark, table_path)
    store.apply_records(recs(
        (b"edge", b"v", NOW - TTL + 100),                     # expires_at = NOW + 100
        (b"neg", b"v", -TTL, ((("ttl.ttl", str(NOW + TTL + 200).encode()),))),  # NOW + 200
        (b"short", b"v", NOW, ((("ttl.ttl", b"50"),))),        # per-record TTL: NOW + 50
        (b"long", b"v", NOW, ((("ttl.ttl", str(INT64_MAX).encode()),))),
    ))
    assert eviction.sweep(store, "wall", NOW + 49).evicted == 0
    assert eviction.sweep(store, "wall", NOW + 50).evicted == 1          # short, exactly at T
    assert eviction.sweep(store, "wall", NOW + 99).evicted == 0          # T - 1 for edge
    first = eviction.sweep(store, "wall", NOW + 100)
    assert first.evicted == 1 and not first.lateness_ms  # measured apart, out of the lock
    assert eviction.measure_lateness(store, first).lateness_ms["max"] == 0
    assert eviction.sweep(store, "wall", NOW + 100).evicted == 0         # idempotent
    assert eviction.sweep(store, "wall", NOW + 200).evicted == 1         # negative ts entry
    assert keys(store) == {b"long"}
    nottl = make_store(spark, table_path + "-nottl", ttl=None)
    nottl.apply_records(recs((b"forever", b"v", NOW)))
    assert eviction.sweep(nottl, "wall", INT64_MAX).evicted == 0


def test_dry_run_changes_nothing_and_previews_a_new_ttl(spark, table_path):
    store = make_store(spark, table_path)
    store.apply_records(recs((b"a", b"v", NOW - 50_000), (b"b", b"v", NOW - 5)))
    version = spark.sql(f"DESCRIBE HISTORY delta.`{table_path}` LIMIT 1").first().version
    preview = eviction.sweep(store, "wall", NOW + 10_000, dry_run=True)
    assert (preview.evicted, preview.sample_keys) == (1, [b"a"])
    assert eviction.would_evict(store, 40_000) == 1            # a: NOW - 10 s <= NOW
    assert eviction.alter_ttl(store, 1, dry_run=True).would_evict_now == 2
    assert spark.sql(f"DESCRIBE HISTORY delta.`{table_path}` LIMIT 1").first().version == version
    assert keys(store) == {b"a", b"b"}


def test_alter_ttl_recomputes_expiry_in_one_commit_and_keeps_record_ttls(spark, table_path):
    store = make_store(spark, table_path)
    store.apply_records(recs((b"a", b"v", NOW), (b"r", b"v", NOW, ((("ttl.ttl", b"5"),)))))
    result = eviction.alter_ttl(store, 1_000)
    assert result.old_ttl == TTL and result.new_ttl == 1_000
    entries = store.entries(at=-(2**63))
    assert entries[b"a"].expires_at == NOW + 1_000
    assert entries[b"r"].expires_at == NOW + 5
    reopened = DeltaStore(spark, StoreConfig(name="ev", path=table_path, ttl=1_000))
    assert reopened.sem.ttl == 1_000


def test_stream_time_sweeps_follow_out_of_order_input_and_survive_restart(spark, table_path):
    store = make_store(spark, table_path, clock="stream")
    assert eviction.sweep(store, "stream").skipped  # idle from the start: nothing by stream
    store.apply_records(recs((b"a", b"v", NOW), (b"b", b"v", NOW + 70_000),
                             (b"c", b"v", NOW + 10)))           # out of order: max wins
    assert store.stream_time.value == NOW + 70_000
    result = eviction.sweep(store, "stream")
    assert (result.t, result.evicted) == (NOW + 70_000, 2)      # a and c expired by then
    store.apply_records(recs((b"d", b"v", NOW + 5)))             # older input: no regression
    restarted = make_store(spark, table_path, clock="stream")
    assert restarted.stream_time.value == NOW + 70_000
    assert keys(restarted) == {b"b"}                              # d expired on arrival


def test_idle_stream_does_not_evict_by_stream_time_but_wall_sweeps_do(spark, table_path):
    wall = FixedClock(NOW)
    store = make_store(spark, table_path, clock="both", wall=wall)
    store.apply_records(recs((b"a", b"v", NOW - 1_000)))
    wall.advance(TTL)                                            # no new input
    assert eviction.sweep(store, "stream").evicted == 0
    assert eviction.sweep(store, "wall").evicted == 1


def test_a_key_refreshed_during_sweeps_survives_and_the_changelog_rebuilds(
        spark, kafka, table_path):
    """Sweeps race a writer that keeps refreshing expiring keys: predicate-based deletes with
    conflict retries never remove a key made live again (a key-list sweep would)."""
    kconf = KafkaConfig(input_topic="x", changelog_topic=f"ev-{uuid.uuid4().hex[:8]}")
    topic.create(clients(kconf, kafka), ChangelogConfig())
    wall = FixedClock(NOW)
    store = make_store(spark, table_path, wall=wall)
    hot = [f"k{i}".encode() for i in range(8)]
    store.apply_records(recs(*[(k, b"v0", NOW - TTL + 1) for k in hot]))
    errors: list[BaseException] = []
    done = threading.Event()

    def sweeper():
        try:
            t = NOW + 1
            while not done.is_set():
                eviction.sweep(store, "wall", t)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    thread = threading.Thread(target=sweeper)
    thread.start()
    writer = DeltaStore(spark, StoreConfig(name="ev", path=table_path, ttl=TTL),
                        wall_clock=FixedClock(NOW))
    try:
        for i in range(3):
            batch = recs(*[(k, b"v%d" % (i + 1), NOW + 1_000 * (i + 1)) for k in hot[:4]])
            eviction.retrying(lambda b=batch: writer.apply_records(b), what="refresh")
    finally:
        done.set()
        thread.join()
    assert not errors, errors
    eviction.sweep(store, "wall", NOW + 1)
    table = store.entries(at=-(2**63))
    assert set(table) == set(hot[:4])                           # refreshed keys survived
    assert {e.value for e in table.values()} == {b"v3"}
    result = Publisher(spark, table_path, "ev", clients(kconf, kafka),
                       ChangelogConfig()).publish()
    rebuilt = rebuild_from_changelog(consume_all(kafka.bootstrap_servers, kconf.changelog_topic,
                                                 result.records))
    assert {k: v for k, (v, _) in rebuilt.items()} == {k: e.value for k, e in table.items()}


def test_scheduled_wall_sweeps_evict_idle_keys_with_expire_tombstones(spark, kafka, table_path):
    name = f"sched-{uuid.uuid4().hex[:8]}"
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "2s"},
                      "kafka": {"input_topic": "x", "changelog_topic": name},
                      "eviction": {"interval": "500ms"},
                      "maintenance": {"optimize_interval": None, "vacuum_interval": None},
                      "stream": {"checkpoint": "unused"}})
    topic.create(clients(conf, kafka), conf.changelog)
    store = DeltaStore(spark, conf.store, wall_clock=WallClock())
    now = WallClock().now_ms()
    store.apply_records(recs((b"a", b"v", now), (b"b", b"v", now)))
    publisher = Publisher(spark, table_path, "ev", clients(conf, kafka),
                          conf.changelog)
    app = App(conf, spark=spark)
    seen = []

    def on_sweep(result) -> None:  # the lock is free again, the lateness measured
        assert jobs.lock.acquire(blocking=False)
        jobs.lock.release()
        seen.append(result)

    jobs = schedule.StoreJobs(store, conf, publish=publisher.publish, guard=app.guard,
                              release=app.release, on_sweep=on_sweep)
    scheduler = schedule.build(conf, jobs, blocking=False)
    scheduler.start()
    try:
        msgs = consume_all(kafka.bootstrap_servers, name, 4, timeout=60)
    finally:
        scheduler.shutdown()
    tombstones = [m for m in msgs if m.value() is None]
    assert {m.key() for m in tombstones} == {b"a", b"b"}
    assert all(dict(m.headers())["ttl.op"] == b"expire" and
               dict(m.headers())["ttl.clock"] == b"wall" for m in tombstones)
    assert jobs.last_sweep is not None
    evicting = [r for r in seen if r.evicted]
    assert evicting and all(r.lateness_ms["p50"] >= 0 for r in evicting)


def test_maintenance_records_its_runs_and_a_restart_runs_an_overdue_one_at_once(spark,
                                                                              table_path):
    """OPTIMIZE and VACUUM record on the table when they finished; a scheduler built later
    (a restarted stream or daemon) runs each an interval after that record, ten minutes
    after its start when that is past, and an interval after its start when the table has
    none: a stream restarted more often than daily would otherwise never VACUUM."""
    import datetime as dt

    from ttl.names import PROP_OPTIMIZED_AT, PROP_VACUUMED_AT
    from ttl.store.layout import set_properties

    store = make_store(spark, table_path)
    store.wall_clock = WallClock()
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "60s"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "maintenance": {"optimize_interval": "1h", "vacuum_interval": "1d"},
                      "stream": {"checkpoint": "unused"}})
    jobs = schedule.StoreJobs(store, conf)

    def first_runs() -> dict[str, float]:
        """Each maintenance job's first run, in seconds from now."""
        scheduler = schedule.build(conf, jobs, blocking=False)
        scheduler.start(paused=True)
        try:
            now = dt.datetime.now(dt.timezone.utc)
            return {job.id: (job.next_run_time - now).total_seconds()
                    for job in scheduler.get_jobs() if job.id in ("optimize", "vacuum")}
        finally:
            scheduler.shutdown(wait=False)

    runs = first_runs()                                            # no record: an interval
    assert 3_500 < runs["optimize"] <= 3_600 and 86_300 < runs["vacuum"] <= 86_400
    before = WallClock().now_ms()
    jobs.optimize()
    eviction.vacuum(store, 7 * 86_400_000, 0, delta_log.latest_version(spark, table_path))
    props = delta_log.properties(spark, table_path)
    assert before <= int(props[PROP_OPTIMIZED_AT]) <= WallClock().now_ms()
    assert before <= int(props[PROP_VACUUMED_AT]) <= WallClock().now_ms()
    runs = first_runs()                          # just run: an interval after the record
    ago = {job: (WallClock().now_ms() - int(props[prop])) / 1000
           for job, prop in (("optimize", PROP_OPTIMIZED_AT), ("vacuum", PROP_VACUUMED_AT))}
    assert abs(runs["optimize"] - (3_600 - ago["optimize"])) < 30, (runs, ago)
    assert abs(runs["vacuum"] - (86_400 - ago["vacuum"])) < 30, (runs, ago)
    long_ago = WallClock().now_ms() - 2 * 86_400_000
    set_properties(spark, table_path, {PROP_OPTIMIZED_AT: str(long_ago),
                                       PROP_VACUUMED_AT: str(long_ago + 3_600_000)})
    runs = first_runs()                             # overdue: once the first batches ran
    assert all(540 < runs[job] <= 600 for job in ("optimize", "vacuum")), runs


def test_the_scheduled_optimize_reorders_the_table_only_once_a_quarter_of_it_is_new(
        spark, table_path):
    """A Z-order rewrites every file of the table, so the scheduled OPTIMIZE reorders the
    whole table only when files written since its last reordering hold a quarter of its
    bytes (``eviction.REORDER_SHARE``); in between it compacts the small files and leaves
    the ordered ones. A table never reordered, or ordered by another ``cluster_by``, is
    reordered first, and a direct call (``ttl upgrade``) always. The rows stay the same
    throughout."""
    import json

    import pyarrow as pa
    from deltalake import DeltaTable

    target = 100_000
    store = make_store(spark, table_path)
    raw = {"store": {"name": "ev", "path": table_path, "ttl": "60s"},
           "kafka": {"input_topic": "x", "changelog_topic": "y"},
           "maintenance": {"optimize_file_bytes": target},
           "stream": {"checkpoint": "unused"}}
    jobs = schedule.StoreJobs(store, from_dict(raw))

    def load(first: int, n: int) -> None:  # incompressible values: files of a known size
        store.apply_records(recs(*[(f"k{i:05d}".encode(), os.urandom(100), NOW + i)
                                   for i in range(first, first + n)]))

    def last_optimize_ordered(by=("expires_at",)) -> bool:
        entry = next(h for h in DeltaTable(table_path).history(20)
                     if h["operation"] == "OPTIMIZE")
        return json.loads(entry["operationParameters"]["zOrderBy"]) == list(by)

    def sizes() -> list[int]:
        files = pa.table(DeltaTable(table_path).get_add_actions(flatten=True))
        return sorted(files["size_bytes"].to_pylist())

    load(0, 3000)
    jobs.optimize()
    assert last_optimize_ordered()                               # never reordered: now
    ordered = sizes()
    assert len(ordered) >= 2 and min(ordered) >= target * 3 // 4
    load(3000, 50)
    load(3050, 50)
    jobs.optimize()
    assert not last_optimize_ordered()                           # 100 new rows: compacted
    now = sizes()
    assert [s for s in now if s < target * 3 // 4] == [now[0]]   # the two small files: one
    assert now[1:] == ordered                                    # the ordered ones kept
    jobs.optimize()
    assert not last_optimize_ordered()                           # nothing new: still not
    load(4000, 1500)
    jobs.optimize()
    assert last_optimize_ordered()                               # a third new: reordered
    assert keys(store) == {f"k{i:05d}".encode()
                           for i in [*range(3100), *range(4000, 5500)]}
    by_key = schedule.StoreJobs(store, from_dict(
        {**raw, "maintenance": {"optimize_file_bytes": target, "cluster_by": "key_hash"}}))
    by_key.optimize()
    assert last_optimize_ordered(["key_hash"])                   # another layout: reordered
    assert eviction.optimize(store) is None and last_optimize_ordered()  # a direct call


def test_a_standalone_sweep_skips_while_another_process_holds_the_lease(spark, table_path):
    store = make_store(spark, table_path)
    stream_lease = Lease(spark, table_path, duration_ms=60_000, holder="stream-job")
    assert stream_lease.acquire()
    standalone = Lease(spark, table_path)
    assert not standalone.acquire()
    assert standalone.held_by_other().holder == "stream-job"
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "60s"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "stream": {"checkpoint": "unused"}})
    app = App(conf, spark=spark)
    jobs = schedule.StoreJobs(store, conf, guard=app.guard, release=app.release)
    assert jobs.wall_sweep() is None
    stream_lease.release()
    # Free now: a run takes the lease for its write and gives it back afterwards.
    assert jobs.wall_sweep() is not None
    assert Lease(spark, table_path).current() is None
    wait_until(lambda: standalone.acquire(), timeout=10, what="the released lease")


def test_a_run_waits_for_a_crashed_holder_but_names_a_live_one_at_once(spark, table_path):
    """``take_lease`` waits (lease durations and slack) for a lease whose row stays
    unchanged, as a crashed stream's does; a holder seen renewing is alive, and the
    second ``ttl run`` is refused with ``StreamOwned``, naming it, once it has watched for
    a lease duration (a holder shutting down cleanly would have released it by then)."""
    import time

    from ttl.errors import StreamOwned
    from ttl.stream import take_lease

    make_store(spark, table_path)
    clock = FixedClock(NOW)
    holder = Lease(spark, table_path, duration_ms=30_000, clock=clock, monotonic=clock,
                   holder="stream:live")
    assert holder.acquire()
    contender = Lease(spark, table_path, duration_ms=30_000, clock=clock, monotonic=clock,
                      holder="second")
    assert not contender.acquire() and not contender.seen_alive     # watching: unchanged
    clock.advance(10_000)
    assert holder.acquire()                                         # the holder renews
    started = time.monotonic()
    with pytest.raises(StreamOwned, match="stream:live"):
        take_lease(contender, "ev", 2_000)                          # watched 2 s, then named
    assert contender.seen_alive and time.monotonic() - started < 30  # not the 66 s wait


def test_a_lease_taken_a_moment_ago_is_held_without_another_merge(spark, table_path):
    """``ttl run`` takes the lease, then the stream's start finds it held for a third of
    its duration (no second MERGE); after that, a release, or a lost race it is not."""
    from ttl.stream import take_lease

    make_store(spark, table_path)
    clock = FixedClock(NOW)
    lease = Lease(spark, table_path, duration_ms=30_000, clock=clock, monotonic=clock,
                  holder="stream")
    assert not lease.held()
    take_lease(lease, "ev", 30_000)
    assert lease.held()
    version = delta_log.latest_version(spark, lease.path)
    take_lease(lease, "ev", 30_000)                                 # held: nothing written
    assert delta_log.latest_version(spark, lease.path) == version
    clock.advance(10_000)                                           # a third gone: renew
    assert not lease.held()
    take_lease(lease, "ev", 30_000)
    assert lease.held() and delta_log.latest_version(spark, lease.path) == version + 1
    lease.release()
    assert not lease.held()
    other = Lease(spark, table_path, duration_ms=30_000, clock=clock, monotonic=clock,
                  holder="other")
    assert other.acquire() and other.held()
    version = delta_log.latest_version(spark, lease.path)
    assert not lease.acquire() and not lease.held()
    # A contender's try commits nothing, so it never makes the holder's renewal conflict.
    assert delta_log.latest_version(spark, lease.path) == version
    assert other.renew() and other.current().holder == "other"


def test_the_holder_deletes_the_lease_rows_old_files_every_interval(spark, table_path):
    """Each renewal writes the row in a new file; a holder deletes the ones the table
    removed (``Lease.clean_up``) when it takes the lease and then once every
    ``CLEAN_EVERY_MS`` of its clock, in a thread of its own, so the directory does not
    gain 8,640 files a day. The row reads the same afterwards; a clean-up that fails costs
    no renewal, and is tried again an interval later."""
    from ttl import lease as lease_module

    def row_files() -> int:
        return sum(1 for name in os.listdir(holder.path) if name.endswith(".parquet"))

    make_store(spark, table_path)
    clock = FixedClock(NOW)
    holder = Lease(spark, table_path, duration_ms=30_000, clock=clock, monotonic=clock,
                   holder="stream")
    cleaned: list[int] = []
    failing = [False]

    def clean_up() -> int:
        if failing[0]:
            raise OSError("the object store is away")
        # The real one deletes only files removed an hour ago by the wall clock; here, all.
        cleaned.append(Lease.clean_up(holder, removed_hours_ago=0))
        return cleaned[-1]

    holder.clean_up = clean_up
    assert holder.acquire()
    wait_until(lambda: cleaned == [0], timeout=30, what="the clean-up at the taking")
    for _ in range(5):
        clock.advance(10_000)
        assert holder.renew()
    assert row_files() == 6 and cleaned == [0]                     # not due yet
    assert Lease.clean_up(holder) == 0          # removed seconds ago: kept for an hour
    clock.advance(lease_module.CLEAN_EVERY_MS)
    assert holder.renew()
    wait_until(lambda: len(cleaned) == 2, timeout=30, what="the hourly clean-up")
    assert cleaned == [0, 6] and row_files() == 1
    assert holder.current().owner == holder.owner
    failing[0] = True
    clock.advance(lease_module.CLEAN_EVERY_MS)
    assert holder.renew()                                          # its clean-up fails
    holder._cleaner.join(30)
    failing[0] = False
    clock.advance(10_000)
    assert holder.renew() and len(cleaned) == 2                    # not before an interval
    clock.advance(lease_module.CLEAN_EVERY_MS)
    assert holder.renew()
    wait_until(lambda: len(cleaned) == 3, timeout=30, what="the clean-up after a failure")
    assert row_files() == 1 and not os.path.exists(os.path.join(holder.path, "_change_data"))


def test_a_standalone_operation_that_loses_its_lease_stops_with_lease_lost(spark, table_path):
    """Reliability 8: while a standalone operation holds the lease, another writer takes it
    (here: after the row lapsed). The heartbeat notices, the operation's block ends with
    LeaseLost (under the command line the main thread is interrupted first, so it stops
    before its next write), and the other writer keeps the lease."""
    from ttl.errors import LeaseLost

    make_store(spark, table_path)
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "60s"},
                      "kafka": {"input_topic": "x", "changelog_topic": "y"},
                      "eviction": {"lease": "3s"}, "stream": {"checkpoint": "unused"}})
    app = App(conf, spark=spark)
    other = Lease(spark, table_path, duration_ms=60_000, holder="other")
    with pytest.raises(LeaseLost, match="lease on .* was lost while the operation ran"):
        with app.claimed() as skipped:
            assert skipped is None
            # Another writer takes the row (as it would once our lease lapsed): done in
            # one UPDATE, so our own heartbeat cannot renew in between; with delta-rs, as
            # the lease's own writes are (a Spark UPDATE lasts seconds, and the heartbeat's
            # renewal every second would make each one conflict).
            far = NOW * 2
            taken = wait_until(lambda: _taken_by(other, far), timeout=30,
                               what="the other writer's UPDATE without a conflict")
            assert taken
            wait_until(app.lease_lost.is_set, timeout=30, what="the heartbeat's notice")
    assert other.current().holder == "other"                        # not given back by us


def test_two_writes_of_the_lease_row_from_one_version_conflict(spark, table_path):
    """What the lease's single winner rests on, in delta-rs (which writes the row): of two
    UPDATEs of the row read at one version, or two MERGEs inserting it into the empty
    table, the second fails with ``lease.CONFLICTS``, and the first one's row stands."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from ttl.lease import CONFLICTS

    lease = Lease(spark, table_path, duration_ms=30_000)
    first, second = DeltaTable(lease.path), DeltaTable(lease.path)  # the empty table

    def insert(table, owner):
        row = pa.table({"id": ["writer"], "owner": [owner], "holder": [owner],
                        "expires_at": pa.array([1], pa.int64())})
        (table.merge(row, "t.id = s.id", source_alias="s", target_alias="t")
         .when_not_matched_insert_all().execute())

    insert(first, "a")
    with pytest.raises(CONFLICTS):
        insert(second, "b")
    first, second = DeltaTable(lease.path), DeltaTable(lease.path)
    free = "id = 'writer' AND owner = 'a'"
    assert first.update(updates={"owner": "'c'"}, predicate=free)["num_updated_rows"] == 1
    with pytest.raises(CONFLICTS):
        second.update(updates={"owner": "'d'"}, predicate=free)
    assert DeltaTable(lease.path).to_pyarrow_table()["owner"].to_pylist() == ["c"]


def _taken_by(other: Lease, expires_at: int) -> bool:
    """``other`` takes the lease row whoever holds it (delta-rs); ``False`` if a concurrent
    commit won."""
    from deltalake import DeltaTable
    from deltalake.exceptions import CommitFailedError

    try:
        DeltaTable(other.path).update(updates={"owner": f"'{other.owner}'",
                                               "holder": "'other'",
                                               "expires_at": str(expires_at)})
    except CommitFailedError:
        return False
    return True


def test_a_lease_is_taken_over_only_once_seen_unchanged_and_the_old_holder_is_fenced(
        spark, table_path):
    """A contender whose wall clock runs 40 s ahead sees the holder's row as expired, but
    takes the lease only after watching that very row unchanged for a full duration on its
    own monotonic clock (a renewal meanwhile starts the watch again). Its takeover fences
    the store table: the old holder, still within its lease by its own clock, refuses its
    next commit and writes nothing."""
    from ttl.errors import LeaseLost
    from ttl.names import PROP_LEASE_FENCE

    store = make_store(spark, table_path)
    store.apply_records(recs((b"a", b"v", NOW)))
    mono_h, mono_c = FixedClock(0), FixedClock(0)
    holder = Lease(spark, table_path, duration_ms=30_000, clock=FixedClock(NOW),
                   monotonic=mono_h, holder="stream")
    assert holder.acquire()
    store.lease = holder
    store.apply_records(recs((b"b", b"v", NOW)))                    # the holder writes
    ahead = Lease(spark, table_path, duration_ms=30_000, clock=FixedClock(NOW + 40_000),
                  monotonic=mono_c, holder="skewed")
    assert not ahead.acquire()                                      # expired by its clock
    mono_c.advance(20_000)
    mono_h.advance(10_000)
    assert holder.renew()                                           # the row changes
    mono_c.advance(20_000)
    assert not ahead.acquire()                                      # the watch starts again
    mono_c.advance(29_999)
    assert not ahead.acquire()
    mono_c.advance(1)
    assert ahead.acquire() and ahead.current().holder == "skewed"   # unchanged for 30 s
    assert delta_log.properties(spark, table_path)[PROP_LEASE_FENCE] == ahead.owner
    version = delta_log.latest_version(spark, table_path)
    assert holder.valid()                                           # by its own clock
    with pytest.raises(LeaseLost, match="taken over by"):
        store.apply_records(recs((b"c", b"v", NOW)))
    with pytest.raises(LeaseLost):
        eviction.sweep(store, "wall", NOW + 60_000)
    mono_h.advance(31_000)                                          # and past its lease
    with pytest.raises(LeaseLost):
        store.apply_records(recs((b"c", b"v", NOW)))
    assert delta_log.latest_version(spark, table_path) == version   # nothing committed
    store.lease = ahead
    assert store.apply_records(recs((b"c", b"v", NOW))).applied    # the new holder writes


def test_sweeping_an_entry_near_the_int64_floor_reports_its_lateness(spark, table_path):
    """Lateness (T - expires_at) must not overflow after the DELETE committed."""
    store = make_store(spark, table_path, ttl=1_000, clock="stream")
    store.apply_records(recs((b"ancient", b"v", -(2**63) + 1)))  # stream time unset: stored
    result = eviction.measure_lateness(store, eviction.sweep(store, "wall", NOW))
    assert result.evicted == 1 and result.lateness_ms["max"] is None  # saturated, not raised


def test_alter_through_the_app_publishes_the_recomputed_expiry(spark, kafka, table_path):
    """``ttl alter`` commits the new TTL, then publishes it although the profile still names
    the old TTL (the publisher must use the store opened under the table's own TTL)."""
    name = f"alter-{uuid.uuid4().hex[:8]}"
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "60s"},
                      "kafka": {"bootstrap_servers": kafka.bootstrap_servers,
                                "input_topic": "x", "changelog_topic": name},
                      "stream": {"checkpoint": "unused"}})
    topic.create(clients(conf, kafka), conf.changelog)
    make_store(spark, table_path, ttl=60_000).apply_records(recs((b"a", b"v", NOW)))
    runtime = App(conf, spark=spark, wall_clock=FixedClock(NOW))
    text = commands.alter(runtime, "2m", dry_run=False)
    assert "-> 120000 ms" in text and "changelog: published 2 records" in text, text
    msgs = consume_all(kafka.bootstrap_servers, name, 2)
    assert [m.key() for m in msgs] == [b"a", b"a"]  # the put, then its new expiry's version
    assert "ttl alter --ttl" not in text


def test_a_sweep_with_nothing_due_commits_nothing_and_a_foreign_write_is_still_swept(
        spark, table_path):
    store = make_store(spark, table_path, ttl=60_000)
    store.apply_records(recs((b"a", b"v", NOW), (b"b", b"v", NOW)))
    version = delta_log.latest_version(spark, table_path)
    idle = eviction.sweep(store, "wall", NOW + 1_000)  # earliest expiry is NOW + 60 s
    assert idle.nothing_due == NOW + 60_000 and idle.evicted == 0
    assert delta_log.latest_version(spark, table_path) == version  # no DELETE, no commit
    # an operator makes "b" expire behind the engine's back: the bound is no longer trusted
    spark.sql(f"UPDATE delta.`{table_path}` SET expires_at = {NOW} WHERE key = X'62'")
    swept = eviction.sweep(store, "wall", NOW + 1_000)
    assert swept.nothing_due is None and swept.evicted == 1
    assert set(store.entries(at=NOW + 1_000)) == {b"a"}
    # our own batch lowers the bound: a record that expires sooner is swept on time
    store.apply_records(recs((b"c", b"v", NOW - 59_000)))  # expires at NOW + 1 s
    assert eviction.sweep(store, "wall", NOW + 500).nothing_due == NOW + 1_000
    assert eviction.sweep(store, "wall", NOW + 1_000).evicted == 1


def test_priming_the_floor_lets_a_new_runs_first_sweep_skip_without_reading_the_table(
        spark, table_path):
    make_store(spark, table_path, ttl=60_000).apply_records(recs((b"a", b"v", NOW)))
    reopened = make_store(spark, table_path, ttl=60_000)  # a new run: nothing known yet
    version, table_id = delta_log.position(spark, table_path)
    assert reopened.expiry_floor.known_at(version, table_id) is None
    assert eviction.prime_expiry_floor(reopened) == NOW + 60_000
    assert reopened.expiry_floor.known_at(version, table_id) == NOW + 60_000
    assert eviction.sweep(reopened, "wall", NOW + 1_000).nothing_due == NOW + 60_000
    empty = make_store(spark, table_path + "-empty", ttl=60_000)
    assert eviction.prime_expiry_floor(empty) == NEVER  # nothing expires


def test_alter_leaves_an_expired_entry_expired_and_publishes_nothing_for_it(
        spark, kafka, table_path):
    """A longer TTL must not resurrect an entry already expired but not yet swept: reads
    keep hiding it, the changelog gets no put for it, and the next sweep removes it."""
    name = f"alter-exp-{uuid.uuid4().hex[:8]}"
    conf = from_dict({"store": {"name": "ev", "path": table_path, "ttl": "20s"},
                      "kafka": {"bootstrap_servers": kafka.bootstrap_servers,
                                "input_topic": "x", "changelog_topic": name},
                      "stream": {"checkpoint": "unused"}})
    topic.create(clients(conf, kafka), conf.changelog)
    store = make_store(spark, table_path, ttl=20_000, wall=FixedClock(NOW - 10_000))
    store.apply_records(recs((b"gone", b"old", NOW - 25_000), (b"live", b"v", NOW - 5_000)))
    assert store.get(b"gone") == b"old"  # live when written, expired at NOW
    runtime = App(conf, spark=spark, wall_clock=FixedClock(NOW))
    preview = commands.alter(runtime, "1h", dry_run=True)
    assert "evicts now: 0; entries already expired, which stay expired" in preview, preview
    assert preview.rstrip().endswith(": 1"), preview
    text = commands.alter(runtime, "1h", dry_run=False)
    assert "changelog: published 3 records" in text, text  # 2 puts, then live's new expiry
    reopened = DeltaStore(spark, StoreConfig(name="ev", path=table_path, ttl=3_600_000),
                          wall_clock=FixedClock(NOW))
    assert reopened.get(b"gone") is None and reopened.get(b"live") == b"v"
    rows = store.entries(at=-(2**63))
    assert rows[b"gone"].expires_at == NOW - 5_000  # untouched: still expired
    assert rows[b"live"].expires_at == NOW - 5_000 + 3_600_000
    msgs = consume_all(kafka.bootstrap_servers, name, 3)
    assert [m.key() for m in msgs].count(b"gone") == 1  # its original put only
    assert eviction.sweep(reopened, "wall", NOW).evicted == 1


def test_maintenance_compacts_and_vacuums_the_dead_letter_table(spark, table_path):
    """Each batch that rejects records adds a file to the dead-letter table (tens of
    thousands a day under steady bad input): the scheduled OPTIMIZE compacts them, rows
    unchanged, and VACUUM runs on that table too, so the compacted files go after the
    retention."""
    import pyarrow as pa

    store = make_store(spark, table_path)
    for offset in range(2):  # a null key: dead-lettered
        store.apply_records([InputRecord(None, b"v", NOW, (), 0, offset),
                             InputRecord(b"k%d" % offset, b"v", NOW, (), 0, 10 + offset)])
    dead = store.dead_letter_path

    def files() -> int:
        return pa.table(delta_rs.table(dead, None).get_add_actions(flatten=True)).num_rows

    assert files() == 2
    rows = sorted(r.source_offset for r in spark.read.format("delta").load(dead).collect())
    schedule.StoreJobs(store, from_dict({
        "store": {"name": "ev", "path": table_path, "ttl": "60s"},
        "kafka": {"input_topic": "x", "changelog_topic": "y"},
        "stream": {"checkpoint": "unused"}})).optimize()
    assert files() == 1
    assert sorted(r.source_offset for r in spark.read.format("delta").load(dead)
                  .collect()) == rows == [0, 1]
    eviction.vacuum(store, 7 * 86_400_000, 0, delta_log.latest_version(spark, table_path))
    assert "VACUUM END" in [r.operation for r in spark.sql(
        f"DESCRIBE HISTORY delta.`{dead}`").collect()]


def test_a_delete_by_position_gives_the_table_and_change_feed_of_deltas_delete(
        spark, tmp_path, monkeypatch):
    """A sweep made by ttl's delete by position (``positional.delete_by_position``) and one
    made by Delta's ``DELETE``, given the same batches and sweeps on two tables: the same
    evictions, rows and, per version, change data feed: a file whose only row goes (removed
    whole), a file that already has a deletion vector (a batch's update) whose vector grows
    and then whose every row goes, a sweep with nothing left to delete (no commit), and a
    row due in a file read by its statistics' range; the commit is a ``DELETE`` with the
    sweep's predicate and ``numDeletedRows``."""
    from collections import Counter

    from ttl.store import write

    # The second sweep finds nothing due by the store's bound on the earliest expiry; the
    # fourth, by a new store that knows only the statistics (which still count the rows
    # the third deleted), reads them and finds them deleted already: no commit.
    sweeps = [NOW + 5, NOW + 5, NOW + 300, NOW + 300, NOW + 2_000]

    def run(way: str):
        path = str(tmp_path / way)
        monkeypatch.setattr(write, "positional_enabled", lambda _spark: way == "positional")
        store = make_store(spark, path)
        store.apply_records(recs(*[(b"k%03d" % i, b"v0", NOW - TTL + 10 * i)
                                   for i in range(100)]))   # k000 expired on arrival
        store.apply_records(recs((b"solo", b"s", NOW - TTL + 5)))    # a file of one row
        store.apply_records(recs((b"k050", b"v1", NOW)))  # the first file gets a vector
        results, changes, operations = [], [], []
        for i, t in enumerate(sweeps):
            result = eviction.sweep(make_store(spark, path) if i == 3 else store, "wall", t)
            results.append((result.evicted, result.write, result.version is None))
            if result.version is None:
                continue
            feed = (spark.read.format("delta").option("readChangeFeed", "true")
                    .option("startingVersion", result.version)
                    .option("endingVersion", result.version).load(path).collect())
            changes.append(Counter((r._change_type, bytes(r.key), bytes(r.value))
                                   for r in feed))
            with open(f"{path}/_delta_log/{result.version:020d}.json") as log_file:
                info = next(json.loads(line)["commitInfo"] for line in log_file
                            if "commitInfo" in line)
            operations.append((info["operation"], info["operationParameters"]["predicate"],
                               int(info["operationMetrics"]["numDeletedRows"])))
        return results, changes, operations, store.entries(at=-(2**63))

    mine = run("positional")
    theirs = run("delta")
    assert [r[0] for r in mine[0]] == [r[0] for r in theirs[0]] == [1, 0, 30, 0, 68]
    assert [r[1] for r in mine[0]] == ["positional", None, "positional", "positional",
                                       "positional"]
    assert [r[1] for r in theirs[0]] == ["delete", None, "delete", "delete", "delete"]
    assert ([r[2] for r in mine[0]] == [r[2] for r in theirs[0]]
            == [False, True, False, True, False])
    assert mine[1] == theirs[1]
    assert mine[1][0] == Counter({("delete", b"solo", b"s"): 1})
    assert [(op, n) for op, _, n in mine[2]] == [(op, n) for op, _, n in theirs[2]]
    assert {op for op, _, _ in mine[2]} == {"DELETE"}
    assert all("expires_at" in predicate for _, predicate, _ in mine[2])
    assert mine[3] == theirs[3] and set(mine[3]) == {b"k050"}


def test_a_sweep_by_position_that_a_refresh_overtakes_runs_again_and_keeps_the_key(
        spark, table_path, monkeypatch):
    """A batch that refreshes a due key commits between the sweep's read of the due rows
    and its commit: Delta refuses the sweep's commit (the refresh rewrote a file it read),
    the sweep runs again from the new version, and the refreshed key survives while the
    others go."""
    from ttl.store import positional

    store = make_store(spark, table_path)
    store.apply_records(recs(*[(b"k%d" % i, b"v0", NOW - TTL + 10) for i in range(6)]))
    writer = make_store(spark, table_path)
    real = positional.delete_by_position
    calls = []

    def overtaken(*args, **kwargs):
        if not calls:  # the refresh lands after the due rows were read
            writer.apply_records(recs((b"k3", b"fresh", NOW + 5_000)))
        calls.append(args[2])  # the version the rows were read at
        return real(*args, **kwargs)

    monkeypatch.setattr(positional, "delete_by_position", overtaken)
    result = eviction.sweep(store, "wall", NOW + 10)
    assert (result.write, result.retries, result.evicted) == ("positional", 1, 5)
    assert len(calls) == 2 and calls[1] == calls[0] + 1
    entries = store.entries(at=-(2**63))
    assert set(entries) == {b"k3"} and entries[b"k3"].value == b"fresh"


def test_a_sweep_by_position_that_fails_before_its_commit_is_deltas_delete(
        spark, table_path, monkeypatch, caplog):
    """A failure after the due rows were read but before anything is committed (here in
    the deletion vectors' step) leaves the sweep to Delta's DELETE: one commit, the same
    evictions, and one warning line that says why."""
    import logging

    from ttl.store import positional

    store = make_store(spark, table_path)
    store.apply_records(recs(*[(b"k%d" % i, b"v0", NOW - TTL + 10 * i) for i in range(1, 7)]))

    def broken(*_args, **_kwargs):
        raise RuntimeError("planted: the vector store failed")

    monkeypatch.setattr(positional, "_deletion_vectors", broken)
    before = delta_log.latest_version(spark, table_path)
    with caplog.at_level(logging.WARNING, logger="ttl.eviction"):
        result = eviction.sweep(store, "wall", NOW + 30)
    assert (result.write, result.evicted, result.version) == ("delete", 3, before + 1)
    assert delta_log.latest_version(spark, table_path) == before + 1  # one commit
    warned = [r.getMessage() for r in caplog.records if "planted" in r.getMessage()]
    assert len(warned) == 1 and "RuntimeError" in warned[0] and "\n" not in warned[0]
    assert keys(store) == {b"k4", b"k5", b"k6"}
