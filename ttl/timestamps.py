"""Timestamps as int64 milliseconds: the bounds, the "no timestamp" sentinel, and expiry.

``expires_at = ts + ttl`` saturates at int64 max instead of wrapping (docs/semantics.md): a record
near the top of the range with a TTL must still "never" expire rather than expire in 1970.
The rule is written once in Python (the reference model, which the batch write runs) and
once as a Spark column (restores, TTL changes, upgrades), and the tests hold both to each
other at the int64 edges. Pure Python at import time (no Spark needed to import it).
"""

from __future__ import annotations

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

#: KIP-228's "no timestamp" (Long.MIN_VALUE); every other int64 is a valid timestamp.
NO_TIMESTAMP = INT64_MIN


def saturating_add(a: int, b: int) -> int:
    """``a + b`` clamped to int64 (Spark's ANSI mode would raise where Java wraps)."""
    return max(INT64_MIN, min(INT64_MAX, a + b))


def expiry(ts: int, ttl_ms: int | None) -> int | None:
    """``expires_at`` of an entry: ``ts + ttl`` saturating; ``None`` when no TTL applies."""
    return None if ttl_ms is None else saturating_add(ts, ttl_ms)


def expiry_arrow(ts, ttl_ms: int | None):
    """The same rule on a numpy int64 array of timestamps and one TTL -> an Arrow int64
    array (all NULL when no TTL applies): the vectorized batch fold's expiries."""
    import numpy as np
    import pyarrow as pa

    if ttl_ms is None:
        return pa.nulls(len(ts), pa.int64())
    with np.errstate(over="ignore"):  # the wrapped sums are the ones replaced by the max
        return pa.array(np.where(ts > INT64_MAX - ttl_ms, INT64_MAX, ts + ttl_ms), pa.int64())


def expiry_column(ts, ttl):
    """The same rule as a Spark column; ``ts`` and ``ttl`` are columns (or column names).

    TTLs are positive (a header or setting of 0 or less is rejected), so only the top can
    overflow; NULL ``ttl`` gives NULL (never expires).
    """
    from pyspark.sql import Column
    from pyspark.sql import functions as F

    ts = ts if isinstance(ts, Column) else F.col(ts)
    ttl = ttl if isinstance(ttl, Column) else F.col(ttl)
    return (F.when(ttl.isNull(), F.lit(None).cast("bigint"))
            .when(ts > F.lit(INT64_MAX) - ttl, F.lit(INT64_MAX))
            .otherwise(ts + ttl))
