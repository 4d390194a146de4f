"""Changelog record format (docs/semantics.md, Changelog), written down once.

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

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterator
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

log = logging.getLogger(__name__)

Op = Literal["put", "delete", "expire"]

#: Keys named in the warning about headers a record cannot carry (the count says the rest).
NAMED_KEYS = 10


def version_offset(properties: dict[str, str]) -> int:
    """What a table adds to its Delta versions on the changelog (its table properties)."""
    return int(properties.get(PROP_VERSION_OFFSET) or 0)


def table_version(changelog_version: int, properties: dict[str, str]) -> int:
    """The table's Delta version that a changelog version (``ttl.version``) stands for: the
    one conversion, for the progress's version and the records' alike."""
    return changelog_version - version_offset(properties)


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
    return ChangelogRecord(key, value, (*user_headers, *_put_engine(
        _num(ts), (VERSION, _num(version)), (STREAM_TIME, _num(stream_time)),
        None if record_ttl is None else _num(record_ttl))))


def tombstone(key: bytes, op: Literal["delete", "expire"], version: int,
              stream_time: int | None, clock: str | None = None) -> ChangelogRecord:
    return ChangelogRecord(key, None, tuple(_tombstone_headers(
        op, (VERSION, _num(version)), (STREAM_TIME, _num(stream_time)), clock)))


_PUT = (OP, b"put")


def _put_engine(ts: bytes, version: tuple, stream_time: tuple,
                record_ttl: bytes | None) -> tuple:
    if record_ttl is None:
        return (TS, ts), _PUT, version, stream_time
    return (TS, ts), _PUT, version, stream_time, (TTL, record_ttl)


def _tombstone_headers(op: str, version: tuple, stream_time: tuple,
                       clock: str | None) -> list[tuple[str, bytes]]:
    if op == "expire":
        return [(OP, b"expire"), version, stream_time, (CLOCK, (clock or "wall").encode())]
    return [(OP, op.encode()), version, stream_time]


#: How a removed key is told on the changelog: its op and, for an expiry, the clock.
Removal = Callable[[bytes], tuple[Literal["delete", "expire"], str | None]]
#: A record as produced: key, value (``None`` for a tombstone), headers.
Produced = tuple[bytes, bytes | None, list[tuple[str, bytes | None]]]


def records(rows, version: int, stream_time: int | None, removal: Removal) -> Iterator[Produced]:
    """The records of one version's rows, in their order: ``put`` for a row whose key is
    ``present`` at the end of the version, else ``tombstone`` with the op and clock
    ``removal`` gives for its key.

    ``rows`` is an Arrow record batch with ``key``, ``present``, ``value``, ``ts``,
    ``headers`` and ``record_ttl``. The records equal ``put``/``tombstone``'s, but are
    built a column at a time: building each one from a row dict was half the publisher's
    time (a 100k-record batch: 0.5 s of 1.1 s).

    A header a record cannot carry (a null element of the headers list, or a null header
    key) is left out, with a warning naming the keys and the version. The engine never
    writes one, but an operator's SQL can; failing on it failed every publication and
    every ``--reseed`` after it, and a null element holds nothing while Kafka has no header
    without a name. A header with a null *value* is Kafka's own and is published as such.
    """
    keys = rows.column("key").to_pylist()
    present = rows.column("present").to_pylist()
    values = rows.column("value").to_pylist()
    ts = _decimals(rows.column("ts"))
    ttls = _decimals(rows.column("record_ttl"))
    user, dropped = _user_headers(rows.column("headers"))
    at = (VERSION, _num(version))
    st = (STREAM_TIME, _num(stream_time))
    for i, key in enumerate(keys):
        if present[i]:
            headers = user(i)
            headers.extend(_put_engine(ts[i], at, st, ttls[i]))
            yield key, values[i], headers
        else:
            op, clock = removal(key)
            yield key, None, _tombstone_headers(op, at, st, clock)
    _warn_dropped([(keys[i], n) for i, n in dropped.items() if present[i]], version)


def _warn_dropped(dropped: list[tuple[bytes, int]], version: int) -> None:
    if not dropped:
        return
    named = ", ".join(f"{key!r} ({n})" for key, n in dropped[:NAMED_KEYS])
    more = f" and {len(dropped) - NAMED_KEYS} more" if len(dropped) > NAMED_KEYS else ""
    log.warning("changelog version %s: %d puts leave out headers their store rows hold but "
                "a Kafka record cannot carry (a null element of the headers list or a null "
                "header key, which only another writer of the table makes); keys (headers "
                "left out): %s%s", version, len(dropped), named, more)


def _decimals(column) -> list[bytes | None]:
    """An integer column as ASCII decimals (``None`` stays ``None``), cast in Arrow."""
    import pyarrow as pa

    return column.cast(pa.string()).cast(pa.binary()).to_pylist()


def _user_headers(column) -> tuple[Callable[[int], list], dict[int, int]]:
    """Row ``i``'s headers (a list column of ``key``/``value`` structs) as a new list of
    ``(key, value)`` pairs (a null list is no headers), and per row how many headers were
    left out: a null element or a null key, which no Kafka record carries (``records``)."""
    offsets = column.offsets.to_pylist()  # into ``values``, which ignores a slice's offset
    base = offsets[0]
    values = column.values.slice(base, offsets[-1] - base)  # only this slice's headers
    # flatten(): a null element's fields are null too (``field()`` gives what its slots
    # hold, an empty name).
    fields = dict(zip((f.name for f in values.type), values.flatten(), strict=True))
    names = fields["key"]
    pairs = list(zip(names.to_pylist(), fields["value"].to_pylist(), strict=True))
    offsets = [o - base for o in offsets]
    valid = column.is_valid().to_pylist() if column.null_count else None
    dropped: dict[int, int] = {}
    if names.null_count:  # rare: only another writer of the table makes one
        for j, (name, _) in enumerate(pairs):
            row = bisect_right(offsets, j) - 1
            if name is None and (valid is None or valid[row]):
                dropped[row] = dropped.get(row, 0) + 1

    if dropped:
        def kept(i: int) -> list:
            if valid is not None and not valid[i]:
                return []
            own = pairs[offsets[i]:offsets[i + 1]]
            return [p for p in own if p[0] is not None] if i in dropped else own

        return kept, dropped
    if valid is not None:
        return (lambda i: pairs[offsets[i]:offsets[i + 1]] if valid[i] else []), dropped
    return (lambda i: pairs[offsets[i]:offsets[i + 1]]), dropped


def split_headers(headers: Headers) -> tuple[Headers, dict[str, bytes | None]]:
    """User headers (in order) and the engine headers of a changelog record."""
    user = tuple((k, v) for k, v in headers if k not in ENGINE_HEADERS)
    engine = {k: v for k, v in headers if k in ENGINE_HEADERS}
    return user, engine
