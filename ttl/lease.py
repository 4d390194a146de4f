"""The single-writer lease of a store (docs/semantics.md, Single writer and the lease).

Open-source Delta checks conflicts per partition, so a sweep and a MERGE on the store table
conflict routinely. While the streaming job runs it is the table's only writer: it holds this
lease and renews it by heartbeat; standalone jobs (sweep, restore into the live table,
upgrade) check it and skip under a live lease.

The lease is a one-row Delta table beside the store (``<store path>_lease``), so it works on
any storage Delta works on. Acquiring or renewing is one UPDATE that only takes the row when
it is free, lapsed, or already ours; Delta's optimistic concurrency makes two acquirers
conflict, so at most one wins. The row is read and written by delta-rs (Rust), not Spark:
a renewal every third of the lease was a Spark UPDATE of 1.9 s on two cores, 3.6 CPU-s of
the driver's (planning, two jobs, the commit and the next snapshot), about a sixth of a
2-core machine for a stream's whole life; with delta-rs it is 0.035 CPU-s
(docs/performance.md, "The lease's heartbeat").
Only delta-rs writes the table (Spark creates it), so its commits follow one engine's
protocol: on S3 a conditional PUT of the commit file, as ``ttl.delta.S3ConditionalLogStore``
(delta-rs's default there), and its conflict checks fail the second of two UPDATEs that
removed the row's one file.

Why it holds without trusting clocks or CPU time (docs: operations, "Clocks and the lease"):

* **Lapsed is observed, never computed from a wall clock.** The row's ``expires_at`` is the
  holder's wall-clock reading plus the duration, shown to operators only. A contender takes
  a lease held by another process only after it has seen the very same row (owner and
  ``expires_at``) unchanged for a full lease duration on its own monotonic clock, and its
  UPDATE matches only that row: a renewal meanwhile changes the row, and the take matches
  nothing. A host whose wall clock runs ahead therefore waits like any other.
* **The holder stops trusting its lease on its own monotonic clock.** It holds the lease
  for one duration from the *start* of its last successful renewal; the contender's
  watch began after that renewal committed, so it ends later (both monotonic clocks count
  the same seconds). Every write of the store first checks this (``check``): a holder
  that was stopped (SIGSTOP, a long pause) past its lease refuses its next commit.
* **A takeover fences the store table itself.** A contender that took a lease it watched
  lapse (not one that was released) commits ``ttl.lease.fence = <its owner id>`` to the
  store table before writing. A write of the old holder that was under way fails at commit
  (Delta fails a transaction when a concurrent commit changed the table's metadata), and
  its retry, like any later write, sees a fence that is not its own and refuses
  (``LeaseLost``). What is left is the moment between a write's check and the snapshot
  its transaction reads (milliseconds, no I/O wait in between): a process frozen exactly
  there and resumed after a takeover could still commit once.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass

from deltalake.exceptions import CommitFailedError

from ttl import delta_log, delta_rs
from ttl.clock import Clock, MonotonicClock, WallClock
from ttl.errors import LeaseLost
from ttl.names import LEASE_SUFFIX, PROP_LEASE_FENCE, sibling
from ttl.store.layout import plain_table, set_properties

log = logging.getLogger(__name__)

#: How long the lease table keeps its commits and removed files. A renewal every third of
#: the lease writes 8,640 commits and as many one-row files a day at the default 30 s, and
#: delta-rs reads the name of every file of ``_delta_log`` (on a local disk, about 1.4 ms
#: per thousand) at each renewal, so the 30 days Delta keeps by default would make each
#: renewal read 260k names (delta-rs writes one file a commit, no checksum). The row's
#: history is of no use: three hours', removed after each checkpoint (every 100 commits),
#: keeps the log to about a thousand files. Delta refuses a log kept
#: for less than its removed files are. Removed files are kept three hours so that each
#: stays listed (checkpoints drop older ones) for two hours after ``clean_up`` may delete
#: it, twice ``CLEAN_EVERY_MS``.
#: No change data either: a renewal would write a change file beside the row's, which no
#: one reads and no VACUUM of removed files deletes.
TABLE_PROPERTIES = {"delta.logRetentionDuration": "interval 3 hours",
                    "delta.deletedFileRetentionDuration": "interval 3 hours",
                    "delta.enableChangeDataFeed": "false"}

#: How often a holder deletes the row's old files (``clean_up``: when it takes the lease,
#: then at this interval), and how old (removed from the table that long ago) a file must
#: be: no reader of the row holds a version for an hour.
CLEAN_EVERY_MS = 3_600_000
CLEAN_AFTER_HOURS = 1
#: How long ``release`` waits for a clean-up under way (a command's process exits after
#: it; a thread inside delta-rs's native code at interpreter exit is best avoided).
CLEANER_JOIN_S = 10.0

#: delta-rs's conflict: another commit won the race (``renew``).
CONFLICTS = (CommitFailedError,)

LEASE_COLUMNS = "id STRING NOT NULL, owner STRING, holder STRING, expires_at BIGINT"
LEASE_ID = "writer"


@dataclass(frozen=True)
class LeaseState:
    owner: str
    holder: str
    expires_at: int

    def live_at(self, now_ms: int) -> bool:
        return self.expires_at > now_ms


class Lease:
    """One process's claim on a store's table; ``acquire``, ``renew``, ``release``."""

    def __init__(self, spark, store_path: str, *, duration_ms: int = 30_000,
                 clock: Clock | None = None, holder: str | None = None,
                 monotonic: Clock | None = None) -> None:
        self.spark = spark.newSession()
        self.store_path = store_path
        self.path = sibling(store_path, LEASE_SUFFIX)
        self.duration_ms = duration_ms
        self.clock = clock or WallClock()  # only for the row's expires_at, shown to people
        self.monotonic = monotonic or MonotonicClock()  # every duration is measured on it
        self.owner = uuid.uuid4().hex
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed_at: int | None = None  # monotonic start of our last renewal
        # Another owner's row as first seen: ((owner, expires_at), monotonic reading).
        self._watched: tuple[tuple[str, int], int] | None = None
        #: Another owner's row was seen to change while watched: its holder is alive (it
        #: renewed), or a third process took it. Nothing is lapsing; a caller that waits
        #: for a crashed holder's lease (``stream.take_lease``) can stop waiting.
        self.seen_alive = False
        self._fence_seen: str | None = None  # the store's fence when we took the lease
        #: How many times this process took the lease (a renewal is not a taking): whatever
        #: ran in between, another holder may have done (``DeltaStore._batch_wall``).
        self.takings = 0
        # One renewal at a time: the heartbeat and a write's check may both renew, and two
        # UPDATEs of our own row would conflict, the loser taking itself for lost.
        self._renewing = threading.Lock()
        self._on_lost = None  # the heartbeat's ``on_lost``: a fenced check calls it too
        self._fence_owed = False  # took a lapsed lease over, the store not yet fenced
        self._cleaned_at: int | None = None  # monotonic time of our last ``clean_up``
        self._cleaner: threading.Thread | None = None
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.path}` ({LEASE_COLUMNS}) "
                       f"USING delta {plain_table(TABLE_PROPERTIES)}")
        self._options = delta_rs.storage_options_for(self.path,
                                                     delta_rs.session_options(self.spark))
        table = self._table()
        if any(table.metadata().configuration.get(k) != v
               for k, v in TABLE_PROPERTIES.items()):
            try:  # a table made before this setting
                table.alter.set_table_properties(TABLE_PROPERTIES)
            except CONFLICTS:  # another process's commit came first: the next start sets it
                log.info("%s: kept its properties as they were (a concurrent commit)",
                         self.path)

    def _table(self):
        """The lease table at its newest version (delta-rs; a few ms on a local disk)."""
        return delta_rs.table(self.path, self._options)

    def _row(self) -> dict | None:
        rows = self._table().to_pyarrow_table(filters=[("id", "=", LEASE_ID)]).to_pylist()
        return rows[0] if rows else None

    def _update(self, updates: dict[str, str], predicate: str) -> bool:
        """One conditional UPDATE of the row; whether it changed it (an UPDATE that matches
        nothing commits nothing)."""
        changed = self._table().update(updates=updates, predicate=predicate)
        return bool(changed["num_updated_rows"])

    def current(self) -> LeaseState | None:
        row = self._row()
        if row is None or row["owner"] is None:
            return None
        return LeaseState(row["owner"], row["holder"], row["expires_at"])

    def held(self) -> bool:
        """Whether this process took or renewed the lease less than a third of its duration
        ago, so it holds it without a look at the table (no one else may take it before
        it lapses). ``ttl run`` takes it before its other start-up steps; the stream then
        finds it held instead of renewing it again."""
        renewed = self._renewed_at
        return renewed is not None and self.monotonic.now_ms() < renewed + self.duration_ms / 3

    def valid(self) -> bool:
        """Whether our lease still runs on our monotonic clock: one duration from the start
        of our last successful renewal (no contender can have taken it before then)."""
        renewed = self._renewed_at
        return renewed is not None and self.monotonic.now_ms() < renewed + self.duration_ms

    def check(self, spark, store_path: str, properties: dict[str, str] | None = None) -> None:
        """Refuse (``LeaseLost``) a write to the store unless we hold the lease now: it
        runs on our monotonic clock, and no contender fenced the store table since we took
        it. Called before every commit of the store (``DeltaStore.check_writable``) and again
        by a write's retry after a conflict (a fence's commit is one). ``properties``: the
        store table's, when the caller just read them."""

        if self._renewed_at is None:
            raise LeaseLost(f"this process does not hold the lease on {store_path} (never "
                            "taken, released, or lost): refusing to commit")
        # Past our lease (stopped, starved): ours again only if our row is still ours.
        if not self.valid() and not self.renew():
            raise LeaseLost(f"the lease on {store_path} was not renewed within its "
                            f"{self.duration_ms} ms (this process was stopped or starved, or "
                            "lost it): refusing to commit")
        if properties is None:
            properties = delta_log.properties(spark, store_path)
        fence = properties.get(PROP_LEASE_FENCE)
        if fence not in (self._fence_seen, self.owner):
            self._renewed_at = None
            if threading.current_thread() is not threading.main_thread():
                self._lost()  # the stream stops (a command's main thread raises below)
            raise LeaseLost(f"the lease on {store_path} was taken over by {fence} "
                            "(ttl.lease.fence on the store table): refusing to commit")

    def held_by_other(self) -> LeaseState | None:
        """The live lease of another process, if any (standalone jobs then skip)."""
        state = self.current()
        if state and state.owner != self.owner and state.live_at(self.clock.now_ms()):
            return state
        return None

    def acquire(self, *, wait: bool = False) -> bool:
        """Take or renew the lease; ``False`` if another process holds it and it was not
        seen lapse (``renew``). With ``wait``, a lease whose row looks lapsed by our wall
        clock (a hint only: the holder may have crashed, or our clock runs ahead) is
        watched for one lease duration, so a one-shot command can take over from a
        crashed stream; a renewal meanwhile means it is live (``False``)."""
        held = self._renewed_at is not None
        if self._acquire(wait):
            if not held:
                # The fence our writes will expect: only a new taking (here) adopts the
                # store's fence; a renewal (heartbeat, ``check``) never does, so a process
                # that lost its lease cannot make a newer holder's fence its own.
                self._fence_seen = self._fence()
                self.takings += 1
            return True
        return False

    def _acquire(self, wait: bool) -> bool:
        if self.renew() or not wait:
            return self._renewed_at is not None
        state, first = self.current(), self._watched
        if state is None or first is None or state.live_at(self.clock.now_ms()):
            return False
        deadline = self.monotonic.now_ms() + self.duration_ms + 5_000
        while self.monotonic.now_ms() < deadline:
            time.sleep(min(1.0, self.duration_ms / 3000))
            if self.renew():
                return True
            if self._watched is None or self._watched[0] != first[0]:
                return False  # the row changed: its holder renewed it, or another took it
        return False

    def renew(self) -> bool:
        """Renew (or take, when free or lapsed) the lease: the heartbeat's path, every third
        of the duration.

        One UPDATE of the lease row that matches only when the row is free, lapsed or
        ours; it reports the rows it changed, so no read follows. A contender's UPDATE
        matches nothing and commits nothing. Two that race both read the row's file in
        their transaction, so Delta fails the second commit with a conflict: at most one
        wins. Only a new lease table (no row yet) takes a MERGE that inserts the row.
        Why not a MERGE every time: it cost about 3 s a renewal (source, join, and a read
        of the row afterwards), against about 1 s for the UPDATE, every ten seconds of a
        stream's life on a 2-core machine.
        """
        with self._renewing:
            return self._renew()

    def _renew(self) -> bool:
        started = self.monotonic.now_ms()
        now = self.clock.now_ms()
        try:
            ours = self._claim(now)
            if ours is None:  # no row yet: a new lease table
                ours = self._insert(now)
            elif not ours:
                ours = self._take_if_lapsed(now)
        except CONFLICTS:
            # Another writer's commit won the race: the row says who holds the lease, and
            # if it is still us, it runs from our previous renewal (this one did not happen).
            state = self.current()
            if state is not None and state.owner == self.owner and self.valid():
                return True
            ours = False
        if ours and self._fence_owed:
            self._fence_store()  # raises on failure: not ours until the store is fenced
            self._fence_owed = False
        # Ours from this renewal's start on, however long the write took.
        self._renewed_at = started if ours else None
        if ours:
            self._clean_up_when_due(started)
        return ours

    def _clean_up_when_due(self, now: int) -> None:
        """Start ``clean_up`` when this process takes the lease and every
        ``CLEAN_EVERY_MS`` of holding after: in a thread of its own, so a slow listing
        (object storage) never holds up a renewal or a write's check. Its commits change
        no row, so they conflict with no renewal or contender."""
        due = self._cleaned_at is None or now - self._cleaned_at >= CLEAN_EVERY_MS
        if not due or (self._cleaner is not None and self._cleaner.is_alive()):
            return
        self._cleaned_at = now
        self._cleaner = threading.Thread(target=self._clean_up_logged, daemon=True,
                                         name="ttl-lease-clean-up")
        self._cleaner.start()

    def _clean_up_logged(self) -> None:
        try:
            deleted = self.clean_up()
        except BaseException:  # noqa: BLE001 - housekeeping (a Rust panic is no Exception)
            log.warning("could not delete the old files of %s; trying again in %s s",
                        self.path, CLEAN_EVERY_MS // 1000, exc_info=True)
            return
        log.info("%s: deleted the lease row's old files (%d listed)", self.path, deleted)

    def clean_up(self, *, removed_hours_ago: int = CLEAN_AFTER_HOURS) -> int:
        """Delete the lease row's files that the table removed at least
        ``removed_hours_ago`` ago (a VACUUM that deletes only files the log lists as
        removed, never an unlisted one, such as a contender's write under way); how many
        it listed (delta-rs deletes every one still listed, so a file deleted by an earlier
        clean-up counts again: a delete of a missing file is a no-op).

        Each renewal writes the row anew in a file of its own, so without this the
        directory would gain 8,640 files a day. Called by a holder when it takes the lease
        and every ``CLEAN_EVERY_MS`` after: a removed file stays in the log's list
        (``TABLE_PROPERTIES``) for two such intervals after it is old enough, so a
        stream's files are deleted whether it runs for days or is restarted every few
        minutes. What it leaves: the files of a failed commit (a contender's lost race),
        which no log lists (docs/operations.md says how to delete them).
        """
        return len(self._table().vacuum(retention_hours=removed_hours_ago, dry_run=False,
                                        enforce_retention_duration=False))

    def _claim(self, now: int) -> bool | None:
        """The conditional UPDATE of a row that is ours or free; ``None`` when the table
        has no lease row yet."""
        # Every renewal changes the row, even when the wall clock stood still or went
        # back: a contender watches the row for changes.
        if self._update(self._ours(f"greatest({now + self.duration_ms}, "
                                   "coalesce(expires_at, 0) + 1)"),
                        f"id = '{LEASE_ID}' AND (owner = '{self.owner}' OR owner IS NULL)"):
            self._watched = None
            return True
        return None if self._row() is None else False

    def _ours(self, expires_at: str) -> dict[str, str]:
        """The UPDATE's new values of a row that names us, its end ``expires_at`` (SQL)."""
        holder = self.holder.replace("'", "''")
        return {"owner": f"'{self.owner}'", "holder": f"'{holder}'", "expires_at": expires_at}

    def _take_if_lapsed(self, now: int) -> bool:
        """Another owner's row: watch it; once seen unchanged for a full duration on our
        monotonic clock, take exactly that row and fence the store table (module
        docstring)."""
        state = self.current()
        if state is None:  # released meanwhile: free
            return bool(self._claim(now))
        seen = (state.owner, state.expires_at)
        mono = self.monotonic.now_ms()
        if self._watched is None or self._watched[0] != seen:
            self.seen_alive = self.seen_alive or self._watched is not None
            self._watched = (seen, mono)
            return False
        if mono - self._watched[1] < self.duration_ms:
            return False
        if not self._update(self._ours(str(now + self.duration_ms)),
                            f"id = '{LEASE_ID}' AND owner = '{state.owner}' AND "
                            f"expires_at = {state.expires_at}"):
            self._watched = None
            return False
        self._watched = None
        log.warning("took over the lease on %s from %s (its row unchanged for %s ms); "
                    "fencing the store table", self.path, state.holder, self.duration_ms)
        self._fence_owed = True  # until committed: a failed fence is retried, never skipped
        return True

    def _fence(self) -> str | None:
        if not delta_log.is_delta_table(self.spark, self.store_path):
            return None
        return delta_log.properties(self.spark, self.store_path).get(PROP_LEASE_FENCE)

    def _fence_store(self) -> None:
        """Commit our owner id as the store table's fence: the old holder's writes refuse
        from now on, and one under way fails at commit (a metadata change)."""

        if not delta_log.is_delta_table(self.spark, self.store_path):
            return  # no table yet (a restore's): nothing of the old holder's to fence
        delta_log.retrying(lambda: set_properties(self.spark, self.store_path,
                                                  {PROP_LEASE_FENCE: self.owner}),
                           what="the lease's fence")

    def _insert(self, now: int) -> bool:
        """Insert the lease row, ours (a MERGE: two processes that both find no row conflict
        instead of inserting two: its transaction read the whole, empty, table); ``True``
        if the row is ours afterwards."""
        import pyarrow as pa

        source = pa.table({"id": [LEASE_ID], "owner": [self.owner], "holder": [self.holder],
                           "expires_at": pa.array([now + self.duration_ms], pa.int64())})
        (self._table().merge(source, "t.id = s.id", source_alias="s", target_alias="t")
         .when_matched_update_all(predicate=f"t.owner = s.owner OR t.owner IS NULL "
                                            f"OR t.expires_at <= {now}")
         .when_not_matched_insert_all()
         .execute())
        state = self.current()
        return state is not None and state.owner == self.owner

    def release(self) -> None:
        self.stop_heartbeat()
        self._renewed_at = None
        self._cleaned_at = None  # the next taking cleans up again
        cleaner = self._cleaner
        if cleaner is not None:  # a one-shot command exits next: not in the middle of it
            cleaner.join(CLEANER_JOIN_S)
        self._update({"owner": "NULL", "expires_at": "0"},
                     f"id = '{LEASE_ID}' AND owner = '{self.owner}'")

    def start_heartbeat(self, on_lost=None) -> None:
        """Renew every third of the duration in a daemon thread; ``on_lost`` once the lease
        is lost: another writer holds it, or renewals failed until it lapsed."""
        self._stop.clear()  # a lease released earlier may be taken and beaten again
        self._on_lost = on_lost

        interval_ms = self.duration_ms / 3

        def beat() -> None:
            # The lease runs from our last renewal (``ttl run`` takes it a moment before the
            # stream starts beating), not from the heartbeat's start; every reading here is
            # monotonic, as ``_renewed_at`` is.
            renewed = self._renewed_at
            start = renewed if renewed is not None else self.monotonic.now_ms()
            held_until = start + self.duration_ms
            wait_ms = max(0.0, start + interval_ms - self.monotonic.now_ms())
            while not self._stop.wait(wait_ms / 1000):
                wait_ms = interval_ms
                now = self.monotonic.now_ms()
                try:
                    if self.renew():
                        # From this renewal's clock reading (a renewal that lost a race
                        # while the row still names us keeps the previous one).
                        held_until = (self._renewed_at or now) + self.duration_ms
                        continue
                    log.error("lease on %s lost to another writer", self.path)
                except BaseException:  # noqa: BLE001 - keep beating while it has slack (a
                    # delta-rs panic is no Exception, and would end the heartbeat unseen)
                    # Lost once the next try would come after the lease lapsed: another
                    # writer may take it from then on.
                    if self.monotonic.now_ms() + interval_ms < held_until:
                        log.warning("lease renewal failed; retrying", exc_info=True)
                        continue
                    log.error("lease on %s lapsed: renewals failed for %s ms", self.path,
                              self.duration_ms, exc_info=True)
                self._renewed_at = None
                self._lost()
                return
        self._thread = threading.Thread(target=beat, name="ttl-lease", daemon=True)
        self._thread.start()

    def _lost(self) -> None:
        """Tell ``on_lost`` once, whoever found the lease lost first."""
        on_lost, self._on_lost = self._on_lost, None
        if on_lost is not None:
            on_lost()

    def stop_heartbeat(self) -> None:
        self._on_lost = None
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
