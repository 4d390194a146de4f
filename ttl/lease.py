"""The single-writer lease of a store (BRIEF §4).

Open-source Delta checks conflicts per partition, so a sweep and a MERGE on the store table
conflict routinely. While the streaming job runs it is the table's only writer: it holds this
lease and renews it by heartbeat; standalone jobs (sweep, restore into the live table,
upgrade) check it and skip under a live lease.

The lease is a one-row Delta table beside the store (``<store path>_lease``), so it works on
any storage Delta works on. Acquiring or renewing is one MERGE that only takes the row when
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
        self.spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{self.path}` ({LEASE_COLUMNS}) "
                       f"USING delta {PLAIN_TABLE}")

    def current(self) -> LeaseState | None:
        rows = self.spark.read.format("delta").load(self.path).where(
            f"id = '{LEASE_ID}'").collect()
        if not rows or rows[0].owner is None:
            return None
        return LeaseState(rows[0].owner, rows[0].holder, rows[0].expires_at)

    def held_by_other(self) -> LeaseState | None:
        """The live lease of another process, if any (standalone jobs then skip)."""
        state = self.current()
        if state and state.owner != self.owner and state.live_at(self.clock.now_ms()):
            return state
        return None

    def acquire(self) -> bool:
        """Take or renew the lease; ``False`` if another process holds a live one.

        A live lease of another process is seen by a read, so a waiting contender never
        writes the lease table (its MERGE could make the holder's renewal conflict). A
        renewal that loses a race with another writer still holds the lease when the row
        still names it (one missed renewal is within the lease's slack)."""
        if self.held_by_other() is not None:
            return False
        return self.renew()

    def renew(self) -> bool:
        """Renew (or take, when free or lapsed) the lease with one MERGE, without the read
        ``acquire`` makes first: the heartbeat's path, every third of the duration."""
        from delta.exceptions import (
            ConcurrentAppendException,
            ConcurrentDeleteDeleteException,
            ConcurrentDeleteReadException,
        )
        from delta.tables import DeltaTable

        now = self.clock.now_ms()
        source = self.spark.createDataFrame(
            [(LEASE_ID, self.owner, self.holder, now + self.duration_ms)],
            "id string, owner string, holder string, expires_at bigint")
        try:
            (DeltaTable.forPath(self.spark, self.path).alias("t")
             .merge(source.alias("s"), "t.id = s.id")
             .whenMatchedUpdateAll(condition=f"t.owner = s.owner OR t.owner IS NULL "
                                             f"OR t.expires_at <= {now}")
             .whenNotMatchedInsertAll()
             .execute())
        except (ConcurrentAppendException, ConcurrentDeleteReadException,
                ConcurrentDeleteDeleteException):
            # Another writer's commit won the race: the row says who holds the lease, and
            # if it is still us, until when (our renewal did not happen).
            state = self.current()
            return (state is not None and state.owner == self.owner
                    and state.live_at(self.clock.now_ms()))
        state = self.current()
        # Our MERGE ran: the row is ours from its clock reading on, however long the MERGE
        # and this read took (a short lease on a loaded machine may look lapsed by now).
        return state is not None and state.owner == self.owner

    def release(self) -> None:
        self.stop_heartbeat()
        self.spark.sql(f"UPDATE delta.`{self.path}` SET owner = NULL, expires_at = 0 "
                       f"WHERE id = '{LEASE_ID}' AND owner = '{self.owner}'")

    def start_heartbeat(self, on_lost=None) -> None:
        """Renew every third of the duration in a daemon thread; ``on_lost`` once the lease
        is lost: another writer holds it, or renewals failed until it lapsed."""
        self._stop.clear()  # a lease released earlier may be taken and beaten again

        interval_ms = self.duration_ms / 3

        def beat() -> None:
            held_until = self.clock.now_ms() + self.duration_ms
            while not self._stop.wait(interval_ms / 1000):
                now = self.clock.now_ms()
                try:
                    if self.renew():
                        held_until = now + self.duration_ms
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
