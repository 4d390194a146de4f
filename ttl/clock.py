"""Clocks: injected everywhere, so nothing in the write path or eviction reads system time.

* ``WallClock``: UTC epoch milliseconds (the only place that calls ``time.time_ns``);
* ``MonotonicClock``: milliseconds for measuring durations (a lease's);
* ``FixedClock``: a settable clock for tests and reproducible runs;
* ``StreamTime``: the largest validated record timestamp ever seen (docs/semantics.md), which only
  moves forward.
"""

from __future__ import annotations

import time
from typing import Literal, Protocol

from ttl.names import PROP_STREAM_TIME_FLOOR, PROP_STREAM_TIME_THROUGH
from ttl.timestamps import NO_TIMESTAMP

ClockKind = Literal["wall", "stream", "both"]


class Clock(Protocol):
    def now_ms(self) -> int: ...


class WallClock:
    """The system's UTC wall clock in epoch milliseconds."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


def wall_ms_or_now(wall_ms: int | None) -> int:
    """``wall_ms`` when a caller (a test, a benchmark, a dry run at a given time) fixes the
    time, else the wall clock's now: the one place commands read the wall clock."""
    return WallClock().now_ms() if wall_ms is None else wall_ms


class MonotonicClock:
    """The system's monotonic clock in milliseconds: for durations only (a lease's), never
    for timestamps. It does not jump with the wall clock, and stops counting for nobody."""

    def now_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class FixedClock:
    """A clock that says what it is told; ``advance`` moves it (tests, benchmarks)."""

    def __init__(self, now_ms: int) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    def advance(self, delta_ms: int) -> None:
        self._now += delta_ms


class StreamTime:
    """Stream time: ``None`` until the first validated record, then never decreasing.

    Invariant: ``value`` is the maximum of every timestamp passed to ``advance`` (and of the
    value it was recovered with); no call can lower it.
    """

    def __init__(self, value: int | None = None) -> None:
        self._value = value

    @property
    def value(self) -> int | None:
        return self._value

    def advance(self, ts: int | None) -> int | None:
        """Raise to ``ts`` if higher; ``None`` (a batch with no valid record) changes nothing."""
        if ts is not None and ts != NO_TIMESTAMP and (self._value is None or ts > self._value):
            self._value = ts
        return self._value


def stream_time_floor(properties: dict[str, str], latest_version: int | None = None
                      ) -> tuple[int | None, int | None]:
    """A store table's stream-time floor and the version it covers, from its properties.

    The rule: stream time is the maximum of the floor and of the stream time recorded by
    every commit after the covered version (``None``: no version is covered, every commit
    still in the log counts), and of the changelog's progress (``recovered_stream_time``). A
    floor without a covered version (written by an engine before the version was kept) is
    still a lower bound, but covers nothing; so does one whose covered version is past the
    table's ``latest_version`` (a floor copied from another table's log with its
    properties)."""
    floor = properties.get(PROP_STREAM_TIME_FLOOR)
    through = properties.get(PROP_STREAM_TIME_THROUGH)
    through = int(through) if floor and through else None
    if through is not None and latest_version is not None and through > latest_version:
        through = None
    return (int(floor) if floor else None, through)


def recovered_stream_time(*found: int | str | None) -> int | None:
    """Stream time as recovered: the largest of what was found (the floor, commits' recorded
    stream times, the changelog's progress), never one of them alone."""
    values = [int(v) for v in found if v is not None]
    return max(values) if values else None


def batch_clock(kind: ClockKind, wall_ms: int, stream_time: int | None) -> int:
    """T0 of a micro-batch (docs/semantics.md): wall, stream time before the batch, or the larger.

    Unset stream time means "no stream-time expiry yet": T0 = ``NO_TIMESTAMP`` (-2^63), at
    which nothing is expired, because ``expires_at = ts + ttl`` with ``ttl > 0`` is always
    above -2^63.
    """
    stream = NO_TIMESTAMP if stream_time is None else stream_time
    if kind == "wall":
        return wall_ms
    if kind == "stream":
        return stream
    return max(wall_ms, stream)
