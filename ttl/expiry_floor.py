"""A lower bound on the earliest ``expires_at`` in a store's table, kept by the driver.

A sweep at clock T deletes ``expires_at <= T``. When the earliest expiry is known to be
after T, the sweep has nothing to do and is skipped without a Delta DELETE, a commit or a
Spark job: that is what keeps a wall sweep every few seconds cheap on an idle store.

The bound is only trusted at the table version it was computed for: the engine's own writes
move it forward (a batch lowers it to its earliest new expiry, a sweep at T raises it above
T), and any other version (an operator's UPDATE, a restore, another process) makes it
unknown, so the next sweep recomputes it with one narrow aggregate over ``expires_at``.
"""

from __future__ import annotations

import threading

from ttl import delta_log
from ttl.timestamps import INT64_MAX

#: "Nothing in the table expires" (no row has an ``expires_at``).
NEVER = INT64_MAX + 1


class ExpiryFloor:
    """``value`` <= every ``expires_at`` in the table at ``version`` (thread-safe).

    ``table_id`` (Delta's table id) guards against a table deleted and recreated at the same
    path, whose version numbers start again.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.value: int | None = None
        self.version: int | None = None
        self.table_id: str | None = None

    def known_at(self, version: int, table_id: str | None = None) -> int | None:
        """The bound if it is valid at ``version`` (of table ``table_id``), else ``None``."""
        with self._lock:
            if table_id is not None and table_id != self.table_id:
                return None
            return self.value if self.version == version else None

    def set(self, version: int, value: int | None, table_id: str | None = None) -> None:
        """The earliest expiry at ``version`` (``None``: nothing expires)."""
        with self._lock:
            self.version, self.value = version, NEVER if value is None else value
            self.table_id = table_id

    def after_write(self, before: int, after: int, earliest_new: int | None) -> None:
        """Our write moved the table from ``before`` to ``after`` (one commit), adding rows
        that expire at ``earliest_new`` at the earliest (removals only raise the minimum)."""
        with self._lock:
            if self.version != before or after != before + 1:
                self.version = self.value = None
                return
            if earliest_new is not None:
                self.value = min(self.value, earliest_new)
            self.version = after

    def after_metadata(self, before: int, after: int) -> None:
        """Our commit moved the table from ``before`` to ``after`` changing no row (a table
        property): the bound holds at ``after`` if that was the only commit."""
        with self._lock:
            if self.version != before or after != before + 1:
                self.version = self.value = None
                return
            self.version = after

    def after_sweep(self, before: int, after: int, t: int, own: int | None) -> None:
        """A sweep at ``t`` started at ``before``; the table is now at ``after`` and the
        sweep's own commit is ``own`` (``None``: it deleted nothing and made none). Nothing
        left expires at or before ``t`` only if no other commit came in between."""
        with self._lock:
            if self.version != before or not (after == before
                                              or (own == after == before + 1)):
                self.version = self.value = None
                return
            self.value = max(self.value, t + 1)
            self.version = after


def earliest_expiry(spark, path: str) -> tuple[int, int | None]:
    """A lower bound on ``min(expires_at)`` of the table at its newest version, and that
    version: from the files' statistics (the log only, whatever the table's size), or,
    when some file has none, one narrow aggregate over the rows.

    A bound, not the minimum: a file's statistics still count rows that a sweep's
    deletion vectors removed since, so after a restart the first sweep may find nothing
    to delete; that sweep then raises the bound (``after_sweep``)."""
    from pyspark.sql import functions as F


    version, low, complete = delta_log.smallest_minimum(spark, path, "expires_at")
    if complete:
        return version, low
    return version, (spark.read.format("delta").option("versionAsOf", version).load(path)
                     .select(F.min("expires_at")).first()[0])
