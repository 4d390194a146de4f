"""Immutable value types, mirroring Kafka Streams' ``ValueAndTimestamp`` family.

A delete is "no value": ``ValueTimestampHeaders.make(None, ...)`` returns ``None``, the way
Kafka's ``ValueAndTimestamp.make`` does, so a tombstone needs no magic object.

Headers are a tuple of ``(key, value)`` pairs: order and duplicates preserved, ``None``
values allowed (Kafka record headers allow all three).
"""

from __future__ import annotations

from dataclasses import dataclass

Header = tuple[str, bytes | None]
Headers = tuple[Header, ...]


@dataclass(frozen=True, slots=True)
class ValueTimestampHeaders:
    """A stored value with its timestamp and headers (KAFKA-20056's ``ValueTimestampHeaders``)."""

    value: bytes
    timestamp: int
    headers: Headers = ()

    @staticmethod
    def make(value: bytes | None, timestamp: int,
             headers: Headers = ()) -> ValueTimestampHeaders | None:
        """``None`` for a null value: a tombstone is simply no value."""
        if value is None:
            return None
        return ValueTimestampHeaders(value, timestamp, tuple(headers))


@dataclass(frozen=True, slots=True)
class InputRecord:
    """One record as read from the input topic (docs/semantics.md, Write semantics).

    ``timestamp`` is the Kafka record timestamp in ms (``-1`` or ``None`` = none); the
    engine headers ``ttl.ts`` / ``ttl.ttl`` travel in ``headers`` until validation.
    """

    key: bytes | None
    value: bytes | None
    timestamp: int | None
    headers: Headers = ()
    partition: int = 0
    offset: int = 0


@dataclass(frozen=True, slots=True)
class ValidRecord:
    """A record that passed validation: its decided timestamp and user headers only."""

    key: bytes
    value: bytes | None
    ts: int
    headers: Headers
    record_ttl: int | None
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Rejection:
    """A record that failed validation, kept whole for the dead-letter table."""

    record: InputRecord
    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class Entry:
    """A row of the store: what the Delta table holds per key.

    ``record_ttl`` is the per-record TTL override (``ttl.ttl``) the entry was written with,
    ``None`` when the store's TTL applies; ``expires_at`` is ``None`` when no TTL applies.
    """

    value: bytes
    ts: int
    headers: Headers
    expires_at: int | None
    record_ttl: int | None = None

    def live_at(self, t: int) -> bool:
        """Live iff it never expires or expires strictly after ``t`` (docs/semantics.md)."""
        return self.expires_at is None or self.expires_at > t
