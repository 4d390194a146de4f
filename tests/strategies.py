"""Hypothesis strategies for input records and micro-batches (docs/semantics.md, Write semantics).

Shared by the pure reference-model tests (``tests/unit/test_model.py``) and the Spark-backed
tests, which replay the same operation sequences against the Delta store and compare it with
``ttl.model.ReferenceStore`` after every batch.

What the generated records contain, and why:

* keys from a SMALL pool (``KEYS``, the empty key included), so a run is mostly collisions;
  each key always lands in the same source partition (``partition_of``), and offsets increase
  per partition in list order, so "list order" is "offset order" for every key;
* puts, deletes (value ``None``), empty values, duplicates and equal timestamps (timestamps
  cluster on a 5 ms grid around the batch's wall clock), out-of-order and negative timestamps,
  int64 edges, timestamps exactly at and just past the ``max_future`` limit;
* timestamps travel the way the engine receives them: in the Kafka timestamp when it can carry
  them (Kafka timestamps are ``-1`` or ``>= 0``), in the ``ttl.ts`` header otherwise or by
  choice (then the Kafka timestamp is unrelated and must be ignored);
* missing timestamps both ways: Kafka timestamp ``-1`` without ``ttl.ts``, and
  ``ttl.ts = -2^63``;
* per-record TTLs (``ttl.ttl``) from tiny to ``2^63 - 1``; engine headers placed anywhere
  among user headers, which have duplicates, ``None`` values and ``ttl``-like names that are
  NOT engine headers (``TTL.ts``, ``ttl``, ``ttlx.ts``);
* invalid records (``invalid=True``): null key, malformed / out-of-range / duplicate / unknown
  ``ttl.*`` headers, ``ttl.ttl <= 0``. Size-limit rejections come from ``semantics()``, which
  sometimes draws limits small enough for the generated values and headers.

Shrinking goes toward: valid records, the first key, puts, timestamps at the wall clock.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence
from typing import NamedTuple

from hypothesis import strategies as st

from ttl.model import Semantics
from ttl.record import InputRecord
from ttl.timestamps import INT64_MAX, INT64_MIN, NO_TIMESTAMP

BASE_MS = 1_700_000_000_000  # 2023-11-14: an ordinary wall clock
DAY_MS = 86_400_000
KEYS: tuple[bytes, ...] = (b"a", b"", b"b", b"\x00\xff", "ключ".encode())
#: A pool wide enough that most keys appear once in a batch: the batch fold's vectorized
#: path takes those (``ttl.store.fold``), the small pool's collisions go to the model.
WIDE_KEYS: tuple[bytes, ...] = KEYS + tuple(b"k%02d" % i for i in range(40))
PARTITIONS = 2

# Per-record and store TTLs: tiny (expire within a few batches), ordinary, and saturating.
TTLS: tuple[int, ...] = (1, 5, 20, 100, 1_000, DAY_MS, 2**62, INT64_MAX)
# Timestamps that are legal but sit on int64 edges (NO_TIMESTAMP itself is "missing").
EDGE_TIMESTAMPS: tuple[int, ...] = (
    INT64_MIN + 1, INT64_MIN + 2, -(2**62), -DAY_MS, -1, 0, 1, 2**62, INT64_MAX - 1, INT64_MAX,
)
# Engine header values rejected wherever they appear (docs/semantics.md's pattern + int64).
MALFORMED_VALUES: tuple[bytes | None, ...] = (
    None, b"", b"-", b"+1", b" 1", b"1 ", b"1\n", b"1.5", b"1e3", b"0x10", b"1_000", b"--1",
    b"12345678901234567890", b"9223372036854775808", b"-9223372036854775809",
    "١".encode(), "１".encode(), b"\xff",
)
UNKNOWN_ENGINE_HEADERS: tuple[str, ...] = ("ttl.op", "ttl.", "ttl.TS", "ttl.ts ", "ttl.ttl.x")
USER_HEADER_KEYS: tuple[str, ...] = ("h", "h", "x-trace", "", "TTL.ts", "ttl", "ttlx.ts", "ü")

CLOCKS = st.sampled_from(["wall", "stream", "both"])


class Batch(NamedTuple):
    """One micro-batch: the wall clock when it starts, and its records in arrival order."""

    wall_ms: int
    records: list[InputRecord]


def partition_of(key: bytes | None, partitions: int = PARTITIONS) -> int:
    """The source partition of a key: stable, so a key lives in one partition."""
    return 0 if key is None else zlib.crc32(key) % partitions


def encode(n: int) -> bytes:
    """An engine header value as a producer writes it."""
    return str(n).encode("ascii")


def assign_offsets(records: Sequence[InputRecord], partitions: int = PARTITIONS,
                   start: dict[int, int] | None = None) -> list[InputRecord]:
    """Put each record in its key's partition with the next offset there (list order)."""
    next_offset = dict(start or {})
    out = []
    for rec in records:
        p = partition_of(rec.key, partitions)
        offset = next_offset.get(p, 0)
        next_offset[p] = offset + 1
        out.append(dataclasses.replace(rec, partition=p, offset=offset))
    return out


def _weighted(draw, *options: tuple[int, st.SearchStrategy]):
    """Draw from one of ``options`` (weight, strategy); shrinks toward the first."""
    pick = draw(st.integers(0, sum(w for w, _ in options) - 1))
    for weight, strategy in options:
        if pick < weight:
            return draw(strategy)
        pick -= weight
    raise AssertionError("unreachable")


@st.composite
def timestamps(draw, wall_ms: int = BASE_MS, max_future_ms: int = DAY_MS) -> int:
    """A valid (non-sentinel) timestamp, mostly on a coarse grid around ``wall_ms``."""
    return _weighted(
        draw,
        (8, st.integers(-40, 40).map(lambda d: wall_ms + 5 * d)),
        (1, st.sampled_from(EDGE_TIMESTAMPS)),
        (1, st.sampled_from((-1, 0, 1)).map(
            lambda d: min(INT64_MAX, wall_ms + max_future_ms + d))),
        (1, st.integers(INT64_MIN + 1, INT64_MAX)),
    )


kafka_timestamps = st.one_of(
    st.just(-1), st.integers(0, 2 * BASE_MS), st.sampled_from((0, INT64_MAX)))
user_headers: st.SearchStrategy[list[tuple[str, bytes | None]]] = st.lists(
    st.tuples(st.sampled_from(USER_HEADER_KEYS * 4 + ("x\ufffd",)),  # rarely not UTF-8
              st.one_of(st.none(), st.binary(max_size=4))),
    max_size=3,
)


@st.composite
def _corruption(draw, engine: list[tuple[str, bytes | None]]) -> list[tuple[str, bytes | None]]:
    """Make the engine headers invalid in one of the ways docs/semantics.md rejects."""
    how = draw(st.sampled_from(("malformed", "ttl_not_positive", "duplicate", "unknown")))
    if how == "malformed":
        name = draw(st.sampled_from(("ttl.ts", "ttl.ttl")))
        return [h for h in engine if h[0] != name] + [(name, draw(st.sampled_from(
            MALFORMED_VALUES)))]
    if how == "ttl_not_positive":
        bad = draw(st.sampled_from((b"0", b"-0", b"-1", b"-9223372036854775808")))
        return [h for h in engine if h[0] != "ttl.ttl"] + [("ttl.ttl", bad)]
    if how == "duplicate":
        name = draw(st.sampled_from(("ttl.ts", "ttl.ttl")))
        value = draw(st.sampled_from((b"1", b"7")))  # a repeat is bad even with equal values
        return [*engine, (name, value), (name, value)]
    return [*engine, (draw(st.sampled_from(UNKNOWN_ENGINE_HEADERS)), b"1")]


@st.composite
def input_records(draw, wall_ms: int = BASE_MS, *, keys: Sequence[bytes] = KEYS,
                  invalid: bool = True, missing: bool = True,
                  max_future_ms: int = DAY_MS) -> InputRecord:
    """One input record (partition/offset left at 0: ``assign_offsets`` sets them)."""
    key: bytes | None = draw(st.sampled_from(keys))
    value = _weighted(draw, (5, st.binary(min_size=1, max_size=6)), (2, st.none()),
                      (1, st.just(b"")))
    engine: list[tuple[str, bytes | None]] = []
    carrier = _weighted(draw, (4, st.just("kafka")), (3, st.just("header")),
                        *(((1, st.just("missing_kafka")), (1, st.just("missing_header")))
                          if missing else ()))
    if carrier in ("kafka", "header"):
        ts = draw(timestamps(wall_ms, max_future_ms))
        if carrier == "kafka" and ts >= 0:  # Kafka cannot carry negative timestamps
            kafka_ts = ts
        else:
            kafka_ts = draw(kafka_timestamps)
            engine.append(("ttl.ts", encode(ts)))
    elif carrier == "missing_kafka":
        kafka_ts = -1
    else:
        kafka_ts = draw(kafka_timestamps)
        engine.append(("ttl.ts", encode(NO_TIMESTAMP)))
    if draw(st.integers(0, 3)) == 3:
        engine.append(("ttl.ttl", encode(draw(st.sampled_from(TTLS)))))
    if invalid and draw(st.integers(0, 7)) == 7:
        if draw(st.integers(0, 4)) == 4:
            key = None
        else:
            engine = draw(_corruption(engine))
    headers: list[tuple[str, bytes | None]] = draw(user_headers)
    for header in engine:  # engine headers anywhere among the user headers
        headers.insert(draw(st.integers(0, len(headers))), header)
    return InputRecord(key, value, kafka_ts, tuple(headers))


def record_lists(wall_ms: int = BASE_MS, *, min_size: int = 0, max_size: int = 30,
                 partitions: int = PARTITIONS, **record_options
                 ) -> st.SearchStrategy[list[InputRecord]]:
    """A flat record sequence with partitions and increasing offsets assigned."""
    return st.lists(input_records(wall_ms, **record_options), min_size=min_size,
                    max_size=max_size).map(lambda rs: assign_offsets(rs, partitions))


@st.composite
def splits(draw, records: Sequence[InputRecord]) -> list[list[InputRecord]]:
    """Cut ``records`` into consecutive non-empty batches at arbitrary points."""
    if not records:
        return []
    cuts = draw(st.lists(st.booleans(), min_size=len(records) - 1,
                         max_size=len(records) - 1))
    out = [[records[0]]]
    for cut, rec in zip(cuts, records[1:], strict=True):
        if cut:
            out.append([rec])
        else:
            out[-1].append(rec)
    return out


@st.composite
def batches(draw, *, base_ms: int = BASE_MS, min_batches: int = 1, max_batches: int = 5,
            max_records: int = 10, partitions: int = PARTITIONS, monotonic_wall: bool = True,
            **record_options) -> list[Batch]:
    """Micro-batches with a wall clock each; records cluster around their batch's clock.

    Wall clocks move forward by 0 ms to 1 s per batch (so small TTLs expire between
    batches), or also backward when ``monotonic_wall`` is false (an NTP step). Offsets run on
    across batches. ``record_options`` go to ``input_records`` (``keys``, ``invalid``,
    ``missing``, ``max_future_ms``).
    """
    steps = (0, 1, 5, 20, 100, 1_000) if monotonic_wall else (0, 5, 100, -3, -100)
    n = draw(st.integers(min_batches, max_batches))
    wall = base_ms
    raw: list[tuple[int, list[InputRecord]]] = []
    for i in range(n):
        if i:
            wall += draw(st.sampled_from(steps))
        raw.append((wall, draw(st.lists(input_records(wall, **record_options),
                                        max_size=max_records))))
    flat = assign_offsets([r for _, rs in raw for r in rs], partitions)
    out, at = [], 0
    for wall_ms, rs in raw:
        out.append(Batch(wall_ms, flat[at:at + len(rs)]))
        at += len(rs)
    return out


@st.composite
def seeded_batches(draw, *, keys: Sequence[bytes], **batch_options) -> list[Batch]:
    """A first batch that puts every key of ``keys`` (plain records at the base clock),
    then ``batches(keys=keys, ...)``: the later batches find their keys stored, so they
    update and remove stored rows (a replace, or a MERGE when a batch only removes keys)
    instead of appending new ones. Offsets run on from the first batch."""
    plan = draw(batches(keys=keys, **batch_options))
    seed = [InputRecord(k, b"seed", BASE_MS) for k in keys]
    flat = assign_offsets(seed + [r for b in plan for r in b.records])
    out, at = [Batch(plan[0].wall_ms, flat[:len(seed)])], len(seed)
    for b in plan:
        out.append(Batch(b.wall_ms, flat[at:at + len(b.records)]))
        at += len(b.records)
    return out


@st.composite
def semantics(draw, *, small_limits: bool = True) -> Semantics:
    """Store settings: TTL, late policy, missing-timestamp policy, future and size limits.

    Small limits (drawn now and then when ``small_limits``) are sized so that some generated
    values (up to 6 bytes) and header lists (an engine header alone is up to 26 bytes) pass
    and some do not.
    """
    small = small_limits and draw(st.integers(0, 3)) == 3
    return Semantics(
        ttl=draw(st.one_of(st.none(), st.sampled_from(TTLS))),
        late_records=draw(st.sampled_from(("update", "drop"))),
        missing_timestamp=draw(st.sampled_from(("reject", "ingest_time"))),
        max_future=_weighted(draw, (4, st.just(DAY_MS)), (1, st.just(50)),
                             (1, st.just(INT64_MAX))),
        max_value_bytes=3 if small else 921_600,
        max_headers_bytes=30 if small else 65_536,
        # small: exactly what the two limits need (StoreConfig's check), so a record within
        # them with several headers (10 bytes of varints each) is still too large to publish
        max_record_bytes=3 + 30 + 512 if small else 1_000_000,
    )

