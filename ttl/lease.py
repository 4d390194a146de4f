"""The single-writer lease of a store (BRIEF §4).

Open-source Delta checks conflicts per partition, so a sweep and a MERGE on the store table
conflict routinely. While the streaming job runs it is the table's only writer: it holds this
lease and renews it by heartbeat; standalone jobs (sweep, restore into the live table,
upgrade) check it and skip under a live lease.

The lease is a one-row Delta table beside the store (``<store path>_lease``), so it works on
any storage Delta works on. Acquiring or renewing is one UPDATE that only takes the row when
it is free, expired, or already ours; Delta's optimistic concurrency makes two acquirers
conflict, so at most one wins.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from dataclasses import dataclass

from ttl.clock import Clock, WallClock
from ttl.names import LEASE_SUFFIX, sibling
from ttl.store.layout import PLAIN_TABLE

log = logging.getLogger(__name__)

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
                 clock: Clock | None = None, holder: str | None = None) -> None:
        self.spark = spark.newSession()
        self.path = sibling(store_path, LEASE_SUFFIX)
        self.duration_ms = duration_ms
        self.clock = clock or WallClock()
        self.owner = uuid.uuid4().hex
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._renewed_at: int | None = None  # our clock reading of our last renewal
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.path}` ({LEASE_COLUMNS}) "
                       f"USING delta {PLAIN_TABLE}")

    def _row(self):
        rows = self.spark.read.format("delta").load(self.path).where(
            f"id = '{LEASE_ID}'").collect()
        return rows[0] if rows else None

    def current(self) -> LeaseState | None:
        row = self._row()
        if row is None or row.owner is None:
            return None
        return LeaseState(row.owner, row.holder, row.expires_at)

    def held(self) -> bool:
        """Whether this process took or renewed the lease less than a third of its duration
        ago, so it holds it without a look at the table (no one else may take it before
        it lapses). ``ttl run`` takes it before its other start-up steps; the stream then
        finds it held instead of renewing it again."""
        renewed = self._renewed_at
        return renewed is not None and self.clock.now_ms() < renewed + self.duration_ms / 3

    def held_by_other(self) -> LeaseState | None:
        """The live lease of another process, if any (standalone jobs then skip)."""
        state = self.current()
        if state and state.owner != self.owner and state.live_at(self.clock.now_ms()):
            return state
        return None

    def acquire(self) -> bool:
        """Take or renew the lease; ``False`` if another process holds a live one (the
        same as ``renew``: its UPDATE writes nothing unless the lease is free, lapsed or
        ours, so a waiting contender never makes the holder's renewal conflict)."""
        return self.renew()

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
        from ttl.delta_log import conflicts

        now = self.clock.now_ms()
        try:
            ours = self._claim(now)
            if ours is None:  # no row yet: a new lease table
                ours = self._insert(now)
        except conflicts():
            # Another writer's commit won the race: the row says who holds the lease, and
            # if it is still us, until when (our renewal did not happen).
            state = self.current()
            if state is not None and state.owner == self.owner and state.live_at(
                    self.clock.now_ms()):
                return True  # still ours, from our previous renewal's reading on
            ours = False
        # Taken or renewed: ours from this clock reading on, however long the write took
        # (a short lease on a loaded machine may look lapsed by now).
        self._renewed_at = now if ours else None
        return ours

    def _claim(self, now: int) -> bool | None:
        """The conditional UPDATE; ``None`` when the table has no lease row yet."""
        holder = self.holder.replace("'", "''")
        changed = self.spark.sql(
            f"UPDATE delta.`{self.path}` SET owner = '{self.owner}', holder = '{holder}', "
            f"expires_at = {now + self.duration_ms} WHERE id = '{LEASE_ID}' AND "
            f"(owner = '{self.owner}' OR owner IS NULL OR expires_at <= {now})").first()
        if changed["num_affected_rows"]:
            return True
        return None if self._row() is None else False

    def _insert(self, now: int) -> bool:
        """Insert the lease row, ours (a MERGE: two processes that both find no row conflict
        instead of inserting two); ``True`` if the row is ours afterwards."""
        from delta.tables import DeltaTable

        source = self.spark.createDataFrame(
            [(LEASE_ID, self.owner, self.holder, now + self.duration_ms)],
            "id string, owner string, holder string, expires_at bigint")
        (DeltaTable.forPath(self.spark, self.path).alias("t")
         .merge(source.alias("s"), "t.id = s.id")
         .whenMatchedUpdateAll(condition=f"t.owner = s.owner OR t.owner IS NULL "
                                         f"OR t.expires_at <= {now}")
         .whenNotMatchedInsertAll()
         .execute())
        state = self.current()
        return state is not None and state.owner == self.owner

    def release(self) -> None:
        self.stop_heartbeat()
        self._renewed_at = None
        self.spark.sql(f"UPDATE delta.`{self.path}` SET owner = NULL, expires_at = 0 "
                       f"WHERE id = '{LEASE_ID}' AND owner = '{self.owner}'")

    def start_heartbeat(self, on_lost=None) -> None:
        """Renew every third of the duration in a daemon thread; ``on_lost`` once the lease
        is lost: another writer holds it, or renewals failed until it lapsed."""
        self._stop.clear()  # a lease released earlier may be taken and beaten again

        interval_ms = self.duration_ms / 3

        def beat() -> None:
            # The lease runs from our last renewal (``ttl run`` takes it a moment before the
            # stream starts beating), not from the heartbeat's start.
            renewed = self._renewed_at
            start = renewed if renewed is not None else self.clock.now_ms()
            held_until = start + self.duration_ms
            wait_ms = max(0.0, start + interval_ms - self.clock.now_ms())
            while not self._stop.wait(wait_ms / 1000):
                wait_ms = interval_ms
                now = self.clock.now_ms()
                try:
                    if self.renew():
                        # From this renewal's clock reading (a renewal that lost a race
                        # while the row still names us keeps the previous one).
                        held_until = (self._renewed_at or now) + self.duration_ms
                        continue
                    log.error("lease on %s lost to another writer", self.path)
                except Exception:  # noqa: BLE001 - keep beating while the lease has slack
                    # Lost once the next try would come after the lease lapsed: another
                    # writer may take it from then on.
                    if self.clock.now_ms() + interval_ms < held_until:
                        log.warning("lease renewal failed; retrying", exc_info=True)
                        continue
                    log.error("lease on %s lapsed: renewals failed for %s ms", self.path,
                              self.duration_ms, exc_info=True)
                self._renewed_at = None
                if on_lost:
                    on_lost()
                return
        self._thread = threading.Thread(target=beat, name="ttl-lease", daemon=True)
        self._thread.start()

    def stop_heartbeat(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
