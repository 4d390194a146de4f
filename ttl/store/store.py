"""``DeltaStore``: the timestamped key-value store on a Delta table (KIP-258's API).

One facade assembled in one place: table layout (``layout``), batch writes (``write``),
commit metadata and stream time (``commit``), reads that hide expired entries. Point writes
(``put``, ``delete``, ...) go through the same batch path as the streaming job, as one-record
batches, so there is one write semantics.
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from ttl import delta_log, delta_rs, input_position
from ttl.arrow import arrow_batches
from ttl.clock import (
    Clock,
    ClockKind,
    StreamTime,
    WallClock,
    batch_clock,
    stream_time_floor,
)
from ttl.config import StoreConfig
from ttl.errors import InvalidRecordError, StoreMissing
from ttl.expiry_floor import ExpiryFloor
from ttl.model import Semantics
from ttl.names import (
    HEADER_TS,
    HEADER_TTL,
    OP_BATCH,
    PROP_INPUT_POSITION,
    PROP_STREAM_TIME_FLOOR,
    PROP_STREAM_TIME_THROUGH,
    PROP_TTL,
)
from ttl.phases import BatchPhases
from ttl.record import Entry, Headers, InputRecord, ValueTimestampHeaders
from ttl.store import layout
from ttl.store.distributed import Figures, held_inputs, write_frame
from ttl.store.fold import records_table
from ttl.store.lookup import Lookup
from ttl.store.write import WriteResult, rejected_wall, write_batch

log = logging.getLogger(__name__)

#: How far the stream-time floor may fall behind the table (``raise_stream_time_floor``):
#: a store's start-up reads at most about this many commits to recover its stream time,
#: and a writer makes one metadata commit this often.
FLOOR_EVERY = 100
FLOOR_EVERY_S = 3_600.0

API_PARTITION = -1  # point writes are not from an input partition
WARM_GROUP = "ttl-warm-snapshot"  # the Spark job group of the snapshot warm-up
CHECKPOINT_GROUP = "ttl-checkpoint"  # and of a background checkpoint
QUIESCE_TIMEOUT_S = 120.0  # how long a shutdown waits for a background checkpoint
#: The store session's broadcast-join threshold: a batch's MERGE source (its changed rows,
#: at most ``stream.max_offsets_per_trigger``) is broadcast to the table's scan instead of
#: both being shuffled. Measured on a 1M-key store, 100k-record batches alternated between
#: two stores (``tests.bench.store_bench``-like): MERGE 4.99 s against 5.80 s with Spark's
#: 10 MB default (64 MB: 5.31 s; Spark's size estimate of the source is well above its
#: bytes). A source estimated larger than this is joined the default way.
MERGE_BROADCAST_BYTES = 200 * 1024 * 1024


class _Background:
    """The threads a store and its twins run beside their writes (snapshot warm-ups,
    checkpoints), so a shutdown can wait for them; the one-checkpoint-at-a-time lock; and
    the newest snapshot warm-up's event, which the next batch waits for whichever of them
    started it (a batch's commit, or the stream's sweep in its twin)."""

    def __init__(self) -> None:
        self.checkpointing = threading.Lock()
        self.warming: threading.Event | None = None  # set once the new snapshot is computed
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self, name: str, target) -> bool:
        from pyspark import InheritableThread

        try:
            thread = InheritableThread(target=target, name=name, daemon=True)
            thread.start()
        except Exception:  # noqa: BLE001 - only background work (e.g. Spark stopping)
            log.debug("could not start %s", name, exc_info=True)
            return False
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        return True

    def join(self, timeout_s: float) -> bool:
        """Wait for every thread started so far; ``False`` if some still run at the end."""
        deadline = time.monotonic() + timeout_s
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in threads)


class DeltaStore:
    """A store: one Delta table, its dead-letter table, its stream time and clocks."""

    def __init__(self, spark, conf: StoreConfig, *, clock: ClockKind = "wall",
                 wall_clock: Clock | None = None, check_ttl: bool = True,
                 create: bool = True) -> None:
        # Its own session: commit settings (userMetadata, txn ids) never leak to others.
        self.spark = spark.newSession()
        self.spark.conf.set("spark.sql.autoBroadcastJoinThreshold", str(MERGE_BROADCAST_BYTES))
        self.conf = conf
        self.path = conf.path
        self.dead_letter_path = conf.dead_letters
        self.sem = Semantics.from_config(conf)
        self.clock_kind: ClockKind = clock
        self.wall_clock = wall_clock or WallClock()
        self.properties = layout.ensure_store_table(self.spark, self.path, conf.name, conf.ttl,
                                                    deletion_vectors=conf.deletion_vectors,
                                                    check_ttl=check_ttl, create=create)
        if not check_ttl:  # the table's TTL rules (``ttl alter`` opens a store this way)
            raw = self.properties.get(PROP_TTL)
            self.sem = replace(self.sem, ttl=None if raw in (None, "none") else int(raw))
        layout.ensure_dead_letter_table(self.spark, self.dead_letter_path)
        opened_at, self.table_id = delta_log.position(self.spark, self.path)  # writes check it
        self.stream_time = StreamTime(self.recover_stream_time())
        # (the version the table's floor covers, monotonic s); none, or one from another
        # log (a copy that kept the properties: ``delta_log.stream_time``): -1
        through = stream_time_floor(self.properties, opened_at)[1]
        if through is None:
            through = -1
        self._floor_raised: tuple[int, float] = (through, time.monotonic())
        self.expiry_floor = ExpiryFloor()  # shared with for_thread twins: one table
        #: The last batch this store ran, and under which taking of which lease
        #: (``_batch_wall``).
        self._last_run: tuple | None = None
        self.lookup = Lookup(conf.lookup, delta_rs.storage_options_for(
            self.path, delta_rs.session_options(self.spark)))
        self._background = _Background()  # shared with for_thread twins: one table
        self._api_offset = 0
        #: The lease this store's writes are made under (``ttl.lease``): set by whoever
        #: took it (``ttl run``, a standalone command); every commit checks it first.
        self.lease = None

    def for_thread(self) -> DeltaStore:
        """The same store for another writer thread: its own Spark session (commit settings
        are per session and shared by its threads), the same stream time and settings."""
        twin = copy.copy(self)
        twin.spark = self.spark.newSession()
        twin._last_run = None  # its own batches, if any, look for an earlier run
        return twin

    # -- stream time and clocks -------------------------------------------------------------

    def recover_stream_time(self) -> int | None:
        """The table's stream time (``delta_log.stream_time``: its floor and the commits
        after the version the floor covers)."""
        return delta_log.stream_time(self.spark, self.path, self.properties)

    def raise_stream_time_floor(self, version: int | None, *, now: bool = False) -> None:
        """Keep the stream-time floor and the input position beside it close behind the
        table's version (after a commit at ``version``), so that recovering them reads a
        bounded number of commits and a clean-up of the log's older commits loses neither:
        once ``FLOOR_EVERY`` versions are past the one the table's floor covers (a table
        without one: at version ``FLOOR_EVERY - 1``), or ``FLOOR_EVERY_S`` seconds after
        the store opened or last raised it, whichever comes first; ``now``: at once, as
        the log's clean-up needs before it removes commits. Never when no commit but the
        floor's own follows the version it covers. Both are computed from the log (the
        old floor and the commits after it), never from this process's own state, so a
        writer with a stale one cannot lower them; the properties go in one metadata
        commit, made in the batch thread (never beside a batch's write) or under the
        store's lock. ``version`` ``None``: a job that made no commit, or does not know its
        version; the time's rule alone, and the log is listed only when it is due."""
        last = self._floor_raised
        due_by_time = time.monotonic() - last[1] >= FLOOR_EVERY_S
        if version is None:
            if not (now or due_by_time):
                return
        elif not now and version - last[0] < FLOOR_EVERY and not due_by_time:
            return
        try:
            self.check_writable()  # a commit like any other: the lease's fence first
            # the version and the properties from one look at the log (one listing)
            through, _, self.properties = delta_log.identity(self.spark, self.path)
            kept = input_position.from_property(self.properties.get(PROP_INPUT_POSITION))
            # at most the floor's own commit after the version it covers (one copied from
            # another table's log, past this one's version, covers nothing here)
            if kept is not None and 0 <= kept[1] <= through <= kept[1] + 1:
                self._floor_raised = (through, time.monotonic())
                return
            value = self.recover_stream_time()
            found = delta_log.recorded_position(self.spark, self.path, self.properties,
                                                latest=through)
            props = {PROP_STREAM_TIME_THROUGH: str(through),
                     PROP_INPUT_POSITION: input_position.to_property(found, through)}
            if value is not None:
                props[PROP_STREAM_TIME_FLOOR] = str(value)
            delta_log.retrying(lambda: layout.set_properties(self.spark, self.path, props),
                               what=f"the stream-time floor of {self.conf.name}")
            # no row changed: the sweeps' bound on the earliest expiry still holds
            self.expiry_floor.after_metadata(
                through, delta_log.latest_version(self.spark, self.path))
        except Exception as exc:  # noqa: BLE001 - the batch is committed; the next retries
            if now:
                raise
            log.warning("raising the stream-time floor of %s failed (%s: %s); the next "
                        "batch tries again", self.conf.name, type(exc).__name__, exc)
            self._floor_raised = (last[0], time.monotonic())  # by time: in an hour
            return
        self._floor_raised = (through, time.monotonic())

    def check_writable(self) -> None:
        """Refuse to commit unless the table is still the one this store opened
        (``StoreMissing``: removed, or created again, meanwhile: a write would make a new
        table there that the changelog's progress does not continue) and the lease taken
        for this store's writes is still ours (``LeaseLost``, ``Lease.check``; no lease
        set: a library user's store, unguarded). Called before every commit."""

        version, table_id, properties = delta_log.identity(self.spark, self.path)
        if version < 0 or table_id != self.table_id:
            what = "removed" if version < 0 else f"replaced (Delta table id {table_id})"
            raise StoreMissing(f"store {self.conf.name}: the table at {self.path} (Delta table "
                               f"id {self.table_id}) was {what} while the store was open: "
                               "refusing to commit")
        if self.lease is not None:
            self.lease.check(self.spark, self.path, properties)

    def now(self) -> int:
        """The store's clock for reads: wall, stream time, or the larger (docs/semantics.md)."""
        return batch_clock(self.clock_kind, self.wall_clock.now_ms(), self.stream_time.value)

    # -- batch writes ------------------------------------------------------------------------

    def apply_batch(self, records, *, wall_ms: int | None = None, metadata: dict | None = None,
                    txn: tuple[str, int] | None = None, phases=None,
                    keep_changes: bool = False) -> WriteResult:
        """Apply input records (an Arrow table or a DataFrame in
        ``fold.input_arrow_schema()``) in one store commit, folded in the driver."""
        table = records if hasattr(records, "num_rows") else records.toArrow()
        # A concurrent commit (an operator's DELETE or UPDATE, a sweep of another process)
        # that conflicts aborts the write without a commit: the whole batch runs again
        # against the new version (lookup, fold, write; the txn id keeps it idempotent).
        done: set[str] = set()
        return self._apply(
            lambda wall, t0, meta: write_batch(
                self.spark, self.path, self.dead_letter_path, table, sem=self.sem,
                wall_ms=wall, t0=t0, metadata=meta, txn=txn, phases=phases,
                keep_changes=keep_changes, done=done, lookup=self.lookup,
                fence=self.check_writable, settle=self.settle),
            wall_ms, metadata, phases, txn, settled_by_write=True)

    def apply_frame(self, records, *, metadata: Callable[[Figures], dict],
                    wall_ms: int | None = None, txn: tuple[str, int] | None = None,
                    phases=None, keep_changes: bool | str = False) -> WriteResult:
        """Apply input records that stay on the executors (a DataFrame in
        ``fold.input_arrow_schema()``'s columns) in one store commit
        (``ttl.store.distributed``): ``metadata`` gives the commit's metadata from the
        batch's figures (its input offsets), and may refuse the batch by raising.
        ``keep_changes``: ``distributed.write_frame``'s."""
        done: set[str] = set()  # as in ``apply_batch``
        with held_inputs(self.spark, records) as inputs:  # for every run again, too
            return self._apply(
                lambda wall, t0, meta: write_frame(
                    self.spark, self.path, self.dead_letter_path, inputs, sem=self.sem,
                    wall_ms=wall, t0=t0,
                    metadata=lambda figures: {**meta, **metadata(figures)},
                    txn=txn, phases=phases, keep_changes=keep_changes, done=done,
                    fence=self.check_writable),
                wall_ms, {}, phases, txn)

    def _apply(self, write: Callable[[int, int, dict], tuple[WriteResult, dict]],
               wall_ms: int | None, metadata: dict | None, phases,
               txn: tuple[str, int] | None, settled_by_write: bool = False) -> WriteResult:
        """One batch commit by ``write(wall, t0, metadata)``, retried after a conflict;
        then stream time, the expiry bound and the next snapshot follow it. The previous
        commit's snapshot (``settle``) is waited for first, or, ``settled_by_write``, by
        ``write`` itself (the driver's path: ``write_batch``'s ``settle``, after a delta-rs
        lookup and the fold, which run while the snapshot is computed)."""
        wall = self._batch_wall(txn) if wall_ms is None else wall_ms
        t0 = batch_clock(self.clock_kind, wall, self.stream_time.value)
        meta = {"op": OP_BATCH, "store": self.conf.name, "clock": self.clock_kind,
                **(metadata or {}), "stream_time": self.stream_time.value}
        if not settled_by_write:
            with (phases or BatchPhases()).phase("snapshot_wait"):
                self.settle()
        (result, final), retries = delta_log.retrying(
            lambda: write(wall, t0, meta), what=f"batch of {self.conf.name}")
        result.retries = retries
        try:
            self.stream_time.advance(final["stream_time"])
            if result.applied:
                self.expiry_floor.after_write(result.version_before, result.version,
                                              result.earliest_expiry)
                self.warm_later()
        except BaseException:
            held = getattr(result.changes, "release", None)  # rows kept on the executors
            if held is not None:
                held()
            raise
        log.debug("batch v%s: %s", result.version, result.counts.as_dict())
        return result

    def _batch_wall(self, txn: tuple[str, int] | None) -> int:
        """A batch's wall clock: now, or the one an earlier run of the batch rejected its
        dead letters at (``write.rejected_wall``). Looked for unless this store ran the
        batch before it under the same taking of its lease (no other process can have run
        this one since): a stream's first batch, a batch run again, the first after the
        lease was taken again."""
        if txn is not None:
            lease = self.lease
            taking = (lease, lease.takings) if lease is not None else (None, 0)
            follows = self._last_run == (txn[0], txn[1] - 1, *taking)
            self._last_run = (txn[0], txn[1], *taking)
            if not follows:
                earlier = rejected_wall(self.spark, self.dead_letter_path, txn)
                if earlier is not None:
                    log.info("%s: batch %s runs again at the wall clock (%s) of its dead "
                             "letters' commit", self.conf.name, txn[1], earlier)
                    return earlier
        return self.wall_clock.now_ms()

    def warm_later(self) -> None:
        """After a batch's commit, or a stream's sweep's (``eviction.sweep``'s ``warm``: a
        20-update batch 0.5 s after a sweep, 1M keys, 1.41 s without, 0.92 s with): compute
        the new version's snapshot in the background (``delta_log.warm_snapshot``) while
        the caller publishes the batch or waits for the next one; the next batch,
        this store's or a twin's, waits for it (``settle``) before its Spark work (on the
        driver's path after its delta-rs lookup and its fold, which overlap it), so its
        jobs never compete with it; and for an earlier warm-up still running. Then, in the
        same thread but no longer waited for, checkpoint when one is due (``_checkpoint``).
        The thread runs its jobs in a job group of its own, so they are not counted as a
        batch's. A failure is harmless (the next write computes the snapshot itself) and
        never fails the batch, which is committed by now."""
        warmed = threading.Event()
        previous = self._background.warming  # set only after it: the next batch waits for both

        def warm() -> None:
            try:
                self.spark.sparkContext.setJobGroup(WARM_GROUP, "ttl snapshot warm-up",
                                                    interruptOnCancel=False)
                delta_log.warm_snapshot(self.spark, self.path)
            except Exception:  # noqa: BLE001 - only a cache: the next write computes it
                log.debug("warming the snapshot of %s failed", self.path, exc_info=True)
            finally:
                if previous is not None:
                    previous.wait()
                warmed.set()
            self._checkpoint()

        if self._background.start("ttl-warm-snapshot", warm):
            self._background.warming = warmed

    def in_background(self, name: str, target: Callable[[], object]) -> bool:
        """Run ``target`` on a thread that ``quiesce`` waits for (work that reads the table
        after a write, and that the writer's caller need not wait for), in a Spark job
        group of its own: not counted as a batch's jobs, and not cancelled with them when
        a stream's query stops. ``False`` if the thread could not start."""

        def run() -> None:
            self.spark.sparkContext.setJobGroup(name, name, interruptOnCancel=False)
            target()

        return self._background.start(name, run)

    def checkpoint_later(self) -> None:
        """Checkpoint in the background when one is due (after a command's sweep or
        maintenance's commit: a stream's batches and sweeps do it after their snapshot
        warm-up)."""
        self._background.start("ttl-checkpoint", self._checkpoint)

    def _checkpoint(self) -> None:
        """Write a Delta checkpoint when one is due (``delta_log.checkpoint_if_due``); store
        tables leave it to the engine (``layout.CHECKPOINT_INTERVAL``), since Delta's own
        runs inside a commit. One at a time (twins included); a failure only warns, and
        the next commit tries again."""
        if not self._background.checkpointing.acquire(blocking=False):
            return  # another thread is checkpointing
        try:
            self.spark.sparkContext.setJobGroup(CHECKPOINT_GROUP, "ttl checkpoint",
                                                interruptOnCancel=False)
            delta_log.checkpoint_if_due(self.spark, self.path)
        except Exception:  # noqa: BLE001 - the next commit tries again
            log.warning("checkpointing %s failed", self.path, exc_info=True)
        finally:
            self._background.checkpointing.release()

    def settle(self) -> None:
        """Wait for the background snapshot of the previous commit (a batch's, or a stream
        sweep's in a twin), if any (a batch waits for it; a checkpoint after it is not
        waited for)."""
        warmed, self._background.warming = self._background.warming, None
        if warmed is not None:
            warmed.wait()

    def quiesce(self, timeout_s: float = QUIESCE_TIMEOUT_S) -> None:
        """Wait for all background work, the twins' included: the snapshot warm-up and a
        checkpoint under way (a stream's shutdown, a command's end, before Spark stops),
        at most ``timeout_s`` (a checkpoint left running is only a warning: a half-written
        one is never used)."""
        self.settle()
        if not self._background.join(timeout_s):
            log.warning("background work on %s (a checkpoint) still runs after %.0f s; "
                        "going on without it", self.path, timeout_s)

    def apply_records(self, records: Iterable[InputRecord], **kwargs) -> WriteResult:
        return self.apply_batch(records_table(list(records)), **kwargs)

    # -- point writes (KIP-258 API) ---------------------------------------------------------

    def _api_record(self, key: bytes, value: bytes | None, timestamp: int,
                    headers: Headers, ttl_ms: int | None) -> InputRecord:
        if ttl_ms is not None:
            headers = (*headers, (HEADER_TTL, str(ttl_ms).encode()))
        self._api_offset += 1
        return InputRecord(key, value, -1, ((HEADER_TS, str(timestamp).encode()), *headers),
                           API_PARTITION, self._api_offset)

    def _write_one(self, records: list[InputRecord]) -> WriteResult:
        result = self.apply_records(records)
        if result.rejected_by_reason:
            raise InvalidRecordError(f"rejected: {dict(result.rejected_by_reason)}")
        return result

    def put(self, key: bytes, value: bytes | None, timestamp: int, headers: Headers = (),
            ttl_ms: int | None = None) -> WriteResult:
        """Put (or delete, for ``None``) one record with an exact timestamp."""
        return self._write_one([self._api_record(key, value, timestamp, headers, ttl_ms)])

    def put_if_absent(self, key: bytes, value: bytes, timestamp: int,
                      headers: Headers = ()) -> ValueTimestampHeaders | None:
        """Put only if no live entry exists; returns the existing entry, or ``None``."""
        current = self.get_with_timestamp(key)
        if current is None:
            self.put(key, value, timestamp, headers)
        return current

    def put_all(self, entries: Iterable[tuple[bytes, bytes | None, int, Headers]]) -> WriteResult:
        """Several puts in one commit, applied in the given order."""
        return self._write_one([self._api_record(k, v, ts, h, None) for k, v, ts, h in entries])

    def delete(self, key: bytes, timestamp: int | None = None) -> ValueTimestampHeaders | None:
        """Delete a key; returns what was live before (KIP-258 returns the old value)."""
        old = self.get_with_timestamp(key)
        ts = self.wall_clock.now_ms() if timestamp is None else timestamp
        self.put(key, None, ts)
        return old

    # -- reads: never return entries expired at the store's clock ---------------------------

    def live_frame(self, at: int | None = None):
        """The table's live rows at clock ``at`` (default: now under the store's clock)."""
        from pyspark.sql import functions as F

        t = self.now() if at is None else at
        table = self.spark.read.format("delta").load(self.path)
        return table.where(F.col("expires_at").isNull() | (F.col("expires_at") > F.lit(t)))

    def get_with_timestamp(self, key: bytes) -> ValueTimestampHeaders | None:
        from pyspark.sql import functions as F

        rows = (self.live_frame().where((F.col("key_hash") == F.xxhash64(F.lit(key)))
                                        & (F.col("key") == F.lit(key))).collect())
        if not rows:
            return None
        return ValueTimestampHeaders.make(bytes(rows[0].value), rows[0].ts,
                                          _headers(rows[0].headers))

    def get(self, key: bytes) -> bytes | None:
        found = self.get_with_timestamp(key)
        return None if found is None else found.value

    def range(self, from_key: bytes,
              to_key: bytes) -> Iterator[tuple[bytes, ValueTimestampHeaders]]:
        """Live entries with ``from_key <= key <= to_key``, in unsigned byte order."""
        from pyspark.sql import functions as F

        frame = self.live_frame().where((F.col("key") >= F.lit(from_key))
                                        & (F.col("key") <= F.lit(to_key)))
        return _iterate(frame)

    def all(self) -> Iterator[tuple[bytes, ValueTimestampHeaders]]:
        return _iterate(self.live_frame())

    def entries(self, at: int | None = None) -> dict[bytes, Entry]:
        """Every live row with its internal fields (tests, drills, status)."""
        return {bytes(r.key): Entry(bytes(r.value), r.ts, _headers(r.headers), r.expires_at,
                                    r.record_ttl)
                for r in self.live_frame(at).collect()}

    def approximate_num_entries(self) -> int:
        """Live entries now (exact today; "approximate" as in KIP-258's contract)."""
        return self.live_frame().count()

    def create_view(self, name: str) -> None:
        """A temp view that hides expired entries for plain SQL.

        Under the wall clock it compares with ``current_timestamp()`` at query time, so it
        stays correct; under the stream clock it uses the stream time of its creation
        (call again after batches to refresh).
        """
        wall = "unix_millis(current_timestamp())"
        stream = str(self.stream_time.value) if self.stream_time.value is not None else None
        clock = {"wall": wall, "stream": stream or f"{-(2**63)}",
                 "both": f"greatest({wall}, {stream})" if stream else wall}[self.clock_kind]
        self.spark.sql(
            f"CREATE OR REPLACE GLOBAL TEMP VIEW {name} AS "
            "SELECT key, value, ts, headers, expires_at, updated_at "
            f"FROM delta.`{self.path}` WHERE expires_at IS NULL OR expires_at > {clock}"
        )


def _headers(raw) -> Headers:
    return tuple((h.key, None if h.value is None else bytes(h.value)) for h in raw or ())


def _iterate(frame) -> Iterator[tuple[bytes, ValueTimestampHeaders]]:
    """The frame's entries in key order, read in Arrow batches (``arrow_batches``): a range
    or ``all()`` over a large store streams without a Python ``Row`` per entry."""

    ordered = frame.select("key", "value", "ts", "headers").orderBy("key")
    for batch in arrow_batches(ordered, prefetch=False):  # callers may stop early
        for row in batch.to_pylist():
            headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
            yield row["key"], ValueTimestampHeaders(row["value"], row["ts"], headers)
