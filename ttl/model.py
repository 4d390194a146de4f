"""The write semantics of docs/semantics.md (Write semantics), stated once, in plain Python.

Pure functions carry the whole contract, and every writer uses them:

* ``validate``: one input record -> a ``ValidRecord`` (timestamp decided, engine headers
  parsed and stripped) or a ``Rejection`` with a reason code, first failing rule wins;
* ``fold_key``: the records of one key, in source offset order, applied one by one to the
  key's stored row with the batch clock T0;
* ``fold_batch``: a whole micro-batch (validation, grouping by key, order, counts) onto the
  stored rows of its keys. The Delta store's batch write runs it on the driver;
* ``ReferenceStore.apply_batch``: ``fold_batch`` on a dict, the in-memory reference the
  Delta store is tested against (the two share the semantics, so they cannot drift; the
  tests check the plumbing around them: lookup, MERGE, dead letters, stream time, replays).

Decisions beyond the plain rules (also in docs/semantics.md):

* A put that is expired on arrival removes the key's row whether that row was live or
  expired-but-unswept (published as an expiry either way); a delete likewise removes either.
* Under ``missing_timestamp = "ingest_time"`` a missing timestamp becomes T0; while stream
  time is still unset (T0 = -2^63 under the stream clock) it becomes the wall clock instead,
  so ``NO_TIMESTAMP`` is never stored.
* Records of one key are ordered by (source partition, offset); a key is expected in one
  partition, and this keeps the order deterministic if it is not.
* Counts are per record and add up to the batch size: upserted + deleted + delete_absent +
  late_dropped + expired_on_arrival + rejected.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from ttl.clock import ClockKind, StreamTime, batch_clock
from ttl.names import ENGINE_PREFIX, HEADER_TS, HEADER_TTL, INPUT_ENGINE_HEADERS
from ttl.record import Entry, Headers, InputRecord, Rejection, ValidRecord
from ttl.timestamps import INT64_MAX, INT64_MIN, NO_TIMESTAMP, expiry, saturating_add

_DECIMAL = re.compile(rb"-?[0-9]{1,19}")

# Rejection reason codes, in the order validation checks them.
NULL_KEY = "null_key"
BAD_ENGINE_HEADER = "bad_engine_header"
BAD_HEADER_KEY = "bad_header_key"
MISSING_TIMESTAMP = "missing_timestamp"
FUTURE_TIMESTAMP = "future_timestamp"
VALUE_TOO_LARGE = "value_too_large"
HEADERS_TOO_LARGE = "headers_too_large"
TOO_LARGE_TO_PUBLISH = "too_large_to_publish"
REASONS = (NULL_KEY, BAD_ENGINE_HEADER, BAD_HEADER_KEY, MISSING_TIMESTAMP, FUTURE_TIMESTAMP,
           VALUE_TOO_LARGE, HEADERS_TOO_LARGE, TOO_LARGE_TO_PUBLISH)

#: What Kafka's Java client (Spark's Kafka source) makes of header-name bytes that are not
#: UTF-8: the replacement character. The name as sent is lost, so the record is refused
#: rather than stored and published under a name nobody sent.
REPLACEMENT_CHARACTER = "\ufffd"

#: What a changelog record adds to its key, value and user headers, at most: the engine's
#: headers (five names with int64 decimals, about 160 bytes), their length varints and the
#: record's own framing in a Kafka record batch.
CHANGELOG_OVERHEAD = 512
#: Per user header: the varints of its name's and value's lengths (5 bytes each at most).
HEADER_OVERHEAD = 10


@dataclass(frozen=True)
class Semantics:
    """The settings the write path depends on."""

    ttl: int | None = None
    late_records: Literal["update", "drop"] = "update"
    missing_timestamp: Literal["reject", "ingest_time"] = "reject"
    max_future: int = 86_400_000
    max_value_bytes: int = 921_600
    max_headers_bytes: int = 65_536
    max_record_bytes: int = 1_000_000

    @classmethod
    def from_config(cls, store) -> Semantics:
        return cls(store.ttl, store.late_records, store.missing_timestamp, store.max_future,
                   store.max_value_bytes, store.max_headers_bytes, store.max_record_bytes)


def parse_engine_int(raw: bytes | None) -> int | None:
    """ASCII decimal ``^-?[0-9]{1,19}$`` within int64, else ``None`` (malformed)."""
    if raw is None or not _DECIMAL.fullmatch(raw):
        return None
    value = int(raw)
    return value if INT64_MIN <= value <= INT64_MAX else None


def headers_size(headers: Headers) -> int:
    return sum(len(k.encode()) + len(v or b"") for k, v in headers)


def changelog_size(key: bytes, value: bytes | None, user_headers: Headers) -> int:
    """An upper bound on the bytes of the changelog record a put of this entry makes (what
    the publisher's producer and the topic's ``max.message.bytes`` must allow)."""
    return (len(key) + len(value or b"") + headers_size(user_headers)
            + HEADER_OVERHEAD * len(user_headers) + CHANGELOG_OVERHEAD)


def _engine_headers(headers: Headers) -> tuple[dict[str, int], Headers] | str:
    """Split engine from user headers; a string is the reason the record is rejected."""
    engine: dict[str, int] = {}
    user = []
    for key, value in headers:
        if not key.startswith(ENGINE_PREFIX):
            user.append((key, value))
            continue
        if key not in INPUT_ENGINE_HEADERS:
            return f"unknown engine header {key!r}"
        if key in engine:
            return f"engine header {key!r} appears twice"
        number = parse_engine_int(value)
        if number is None:
            return f"engine header {key!r} is not an int64 decimal: {value!r}"
        if key == HEADER_TTL and number <= 0:
            return f"engine header {key!r} must be > 0, got {number}"
        engine[key] = number
    return engine, tuple(user)


def validate(rec: InputRecord, wall_ms: int, t0: int, sem: Semantics) -> ValidRecord | Rejection:
    """docs/semantics.md validation, in order; the first rule that applies decides."""
    if rec.key is None:
        return Rejection(rec, NULL_KEY, "the record has no key")
    parsed = _engine_headers(rec.headers)
    if isinstance(parsed, str):
        return Rejection(rec, BAD_ENGINE_HEADER, parsed)
    engine, user_headers = parsed
    mangled = next((k for k, _ in user_headers if REPLACEMENT_CHARACTER in k), None)
    if mangled is not None:
        return Rejection(rec, BAD_HEADER_KEY, f"header name {mangled!r} was not UTF-8 "
                         "(the replacement character stands for its bytes)")
    if HEADER_TS in engine:
        ts, missing = engine[HEADER_TS], engine[HEADER_TS] == NO_TIMESTAMP
    else:
        ts = rec.timestamp if rec.timestamp is not None else -1
        # Kafka's "no timestamp" is -1; -2^63 is never a timestamp (docs/semantics.md), whatever
        # carries it.
        missing = ts in (-1, NO_TIMESTAMP)
    if missing:
        if sem.missing_timestamp == "reject":
            return Rejection(rec, MISSING_TIMESTAMP, "no ttl.ts header and no Kafka timestamp")
        ts = t0 if t0 != NO_TIMESTAMP else wall_ms
    limit = saturating_add(wall_ms, sem.max_future)
    if ts > limit:
        return Rejection(rec, FUTURE_TIMESTAMP, f"timestamp {ts} is after {limit}")
    if rec.value is not None and len(rec.value) > sem.max_value_bytes:
        return Rejection(rec, VALUE_TOO_LARGE, f"{len(rec.value)} > {sem.max_value_bytes} bytes")
    size = headers_size(rec.headers)
    if size > sem.max_headers_bytes:
        return Rejection(rec, HEADERS_TOO_LARGE, f"{size} > {sem.max_headers_bytes} bytes")
    size = changelog_size(rec.key, rec.value, user_headers)
    if size > sem.max_record_bytes:
        return Rejection(rec, TOO_LARGE_TO_PUBLISH,
                         f"its changelog record would be {size} > {sem.max_record_bytes} "
                         "bytes (store.max_record_bytes)")
    return ValidRecord(rec.key, rec.value, ts, user_headers, engine.get(HEADER_TTL),
                       rec.partition, rec.offset)


@dataclass
class Counts:
    """Per-record outcome counts of a batch (they add up to ``records``)."""

    records: int = 0
    upserted: int = 0
    deleted: int = 0
    delete_absent: int = 0
    late_dropped: int = 0
    expired_on_arrival: int = 0
    rejected: Counter = field(default_factory=Counter)

    def add(self, other: Counts) -> None:
        for name in ("records", "upserted", "deleted", "delete_absent", "late_dropped",
                     "expired_on_arrival"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.rejected.update(other.rejected)

    def as_dict(self) -> dict:
        return {"records": self.records, "upserted": self.upserted, "deleted": self.deleted,
                "delete_absent": self.delete_absent, "late_dropped": self.late_dropped,
                "expired_on_arrival": self.expired_on_arrival,
                "rejected": dict(sorted(self.rejected.items()))}


@dataclass(frozen=True)
class KeyOutcome:
    """What a batch did to one key: its final row and how the table must change."""

    key: bytes
    final: Entry | None
    had_row: bool
    changed: bool
    removal_op: Literal["delete", "expire"] | None
    counts: Counts
    max_ts: int | None


def fold_key(key: bytes, existing: Entry | None, records: Sequence[ValidRecord], t0: int,
             sem: Semantics) -> KeyOutcome:
    """Apply one key's records one by one (offset order) to its row, all with clock ``t0``.

    ``existing`` is the stored row, possibly expired-but-unswept: it counts as absent for
    puts and late checks, but a delete or an expired-on-arrival put still removes it.
    """
    row = existing
    removal: Literal["delete", "expire"] | None = None
    counts = Counts(records=len(records))
    for rec in records:
        live = row if row is not None and row.live_at(t0) else None
        if sem.late_records == "drop" and live is not None and rec.ts < live.ts:
            counts.late_dropped += 1
            continue
        if rec.value is None:
            if row is None:
                counts.delete_absent += 1
            else:
                row, removal = None, "delete"
                counts.deleted += 1
            continue
        ts = max(live.ts, rec.ts) if live is not None else rec.ts
        ttl = rec.record_ttl if rec.record_ttl is not None else sem.ttl
        expires_at = expiry(ts, ttl)
        if expires_at is not None and expires_at <= t0:
            counts.expired_on_arrival += 1
            if row is not None:
                row, removal = None, "expire"
            continue
        row = Entry(rec.value, ts, rec.headers, expires_at, rec.record_ttl)
        counts.upserted += 1
    max_ts = max((r.ts for r in records), default=None)
    return KeyOutcome(key, row, existing is not None, row is not existing,
                      removal if row is None else None, counts, max_ts)


def order_key(rec: ValidRecord | InputRecord) -> tuple[int, int]:
    """(partition, offset), a missing one first (records given without a source position)."""
    return (INT64_MIN if rec.partition is None else rec.partition,
            INT64_MIN if rec.offset is None else rec.offset)


@dataclass
class BatchResult:
    t0: int
    counts: Counts
    outcomes: list[KeyOutcome]
    rejections: list[Rejection]
    stream_time: int | None


def fold_batch(records: Iterable[InputRecord], stored: Mapping[bytes, Entry], wall_ms: int,
               t0: int, sem: Semantics) -> BatchResult:
    """A whole micro-batch: validate every record, then fold each key's valid records in
    (partition, offset) order onto its stored row (``stored``: the rows of the batch's keys,
    or more), all with clock ``t0``. ``stream_time`` of the result is the batch's largest
    validated timestamp (``None`` if none): the caller raises its stream time with it.
    The reference store and the engine's batch write both run exactly this.
    """
    by_key: dict[bytes, list[ValidRecord]] = {}
    rejections: list[Rejection] = []
    counts = Counts()
    for rec in records:
        checked = validate(rec, wall_ms, t0, sem)
        if isinstance(checked, Rejection):
            rejections.append(checked)
            counts.records += 1
            counts.rejected[checked.reason] += 1
        else:
            by_key.setdefault(checked.key, []).append(checked)
    outcomes = []
    batch_max: int | None = None
    for key, recs in by_key.items():
        outcome = fold_key(key, stored.get(key), sorted(recs, key=order_key), t0, sem)
        outcomes.append(outcome)
        counts.add(outcome.counts)
        if outcome.max_ts is not None:
            batch_max = outcome.max_ts if batch_max is None else max(batch_max, outcome.max_ts)
    return BatchResult(t0, counts, outcomes, rejections, batch_max)


class ReferenceStore:
    """docs/semantics.md on a dict: the reference the Delta store must equal after every batch."""

    def __init__(self, sem: Semantics, clock: ClockKind = "wall",
                 stream_time: int | None = None) -> None:
        self.sem = sem
        self.clock = clock
        self.entries: dict[bytes, Entry] = {}
        self.stream_time = StreamTime(stream_time)

    def apply_batch(self, records: Iterable[InputRecord], wall_ms: int) -> BatchResult:
        t0 = batch_clock(self.clock, wall_ms, self.stream_time.value)
        result = fold_batch(records, self.entries, wall_ms, t0, self.sem)
        for outcome in result.outcomes:
            if outcome.final is None:
                self.entries.pop(outcome.key, None)
            else:
                self.entries[outcome.key] = outcome.final
        self.stream_time.advance(result.stream_time)
        result.stream_time = self.stream_time.value
        return result

    def live(self, t: int) -> dict[bytes, Entry]:
        """What reads return at clock ``t``: expired entries hidden, swept or not."""
        return {k: e for k, e in self.entries.items() if e.live_at(t)}

    def sweep(self, t: int) -> list[bytes]:
        """Remove exactly the entries with ``expires_at <= t``; returns their keys."""
        gone = [k for k, e in self.entries.items() if not e.live_at(t)]
        for key in gone:
            del self.entries[key]
        return gone
