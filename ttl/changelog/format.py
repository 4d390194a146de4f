"""Changelog record format (BRIEF §5), written down once.

Put record::

    key     = the store key
    value   = the entry's value
    headers = the entry's user headers, in order, then the engine headers
              ttl.ts=<exact ts>, ttl.op=put, ttl.version=<changelog version>,
              ttl.stream-time=<stream time or "none">, and ttl.ttl=<ms> if the entry
              carries a per-record TTL

Tombstone::

    key     = the store key
    value   = null
    headers = ttl.op=delete|expire, ttl.version, ttl.stream-time, and ttl.clock=wall|stream
              for an expiry

The changelog version of a Delta version is the version plus the table's
``ttl.changelog.version_offset`` (``version_offset``; 0 unless a restore into a new table
set it): versions on the topic never go back, whichever table the store was rebuilt into.

Engine header values are ASCII decimals. Record timestamps are the broker's
(``LogAppendTime``), never the entry's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ttl.names import CHANGELOG_ENGINE_HEADERS as ENGINE_HEADERS
from ttl.names import HEADER_CLOCK as CLOCK
from ttl.names import HEADER_OP as OP
from ttl.names import HEADER_STREAM_TIME as STREAM_TIME
from ttl.names import HEADER_TS as TS
from ttl.names import HEADER_TTL as TTL
from ttl.names import HEADER_VERSION as VERSION
from ttl.names import PROP_VERSION_OFFSET
from ttl.record import Headers

Op = Literal["put", "delete", "expire"]


def version_offset(properties: dict[str, str]) -> int:
    """What a table adds to its Delta versions on the changelog (its table properties)."""
    return int(properties.get(PROP_VERSION_OFFSET) or 0)


def _num(value: int | None) -> bytes:
    return b"none" if value is None else str(value).encode("ascii")


@dataclass(frozen=True)
class ChangelogRecord:
    """One record as published: what a key looks like at the end of a Delta version."""

    key: bytes
    value: bytes | None
    headers: Headers


def put(key: bytes, value: bytes, ts: int, user_headers: Headers, version: int,
        stream_time: int | None, record_ttl: int | None) -> ChangelogRecord:
    engine = [(TS, _num(ts)), (OP, b"put"), (VERSION, _num(version)),
              (STREAM_TIME, _num(stream_time))]
    if record_ttl is not None:
        engine.append((TTL, _num(record_ttl)))
    return ChangelogRecord(key, value, (*user_headers, *engine))


def tombstone(key: bytes, op: Literal["delete", "expire"], version: int,
              stream_time: int | None, clock: str | None = None) -> ChangelogRecord:
    engine = [(OP, op.encode()), (VERSION, _num(version)), (STREAM_TIME, _num(stream_time))]
    if op == "expire":
        engine.append((CLOCK, (clock or "wall").encode()))
    return ChangelogRecord(key, None, tuple(engine))


def split_headers(headers: Headers) -> tuple[Headers, dict[str, bytes | None]]:
    """User headers (in order) and the engine headers of a changelog record."""
    user = tuple((k, v) for k, v in headers if k not in ENGINE_HEADERS)
    engine = {k: v for k, v in headers if k in ENGINE_HEADERS}
    return user, engine
