"""The reference model (``ttl.model``) against docs/semantics.md (Write semantics), without a JVM.

Two kinds of tests:

* examples named after the behaviour they pin down, each a sentence of docs/semantics.md;
* properties over generated operation sequences (``tests.strategies``): the model's own
  invariants, and agreement after every batch with ``Naive``, a deliberately simple
  one-record-at-a-time re-statement of the rules written from docs/semantics.md (it does not
  call ``validate`` or ``fold_key``). Where the rules leave a choice, ``Naive`` takes the decisions
  listed in ``ttl.model``'s docstring.

The Delta store is tested against ``ReferenceStore``; if the model is wrong, everything
downstream is consistently wrong, which is why the model gets an independent check here.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.strategies import (
    BASE_MS,
    CLOCKS,
    DAY_MS,
    MALFORMED_VALUES,
    UNKNOWN_ENGINE_HEADERS,
    Batch,
    batches,
    record_lists,
    semantics,
    splits,
)
from ttl.clock import StreamTime, batch_clock
from ttl.model import (
    BAD_ENGINE_HEADER,
    BAD_HEADER_KEY,
    FUTURE_TIMESTAMP,
    HEADERS_TOO_LARGE,
    MISSING_TIMESTAMP,
    NULL_KEY,
    REASONS,
    TOO_LARGE_TO_PUBLISH,
    VALUE_TOO_LARGE,
    Counts,
    ReferenceStore,
    Semantics,
    parse_engine_int,
    validate,
)
from ttl.record import Entry, InputRecord, Rejection
from ttl.timestamps import INT64_MAX, INT64_MIN, NO_TIMESTAMP

W = BASE_MS  # the wall clock of most examples
NO_LIMIT = INT64_MAX
DEFAULT = Semantics()


# --- helpers -----------------------------------------------------------------------------------

def rec(key: bytes | None = b"k", value: bytes | None = b"v", ts: int | None = W, *,
        headers: tuple = (), ttl: int | None = None, kafka_ts: int | None = None,
        offset: int = 0) -> InputRecord:
    """A record; ``ts`` travels as Kafka timestamp when it can, else as ``ttl.ts``."""
    engine: list = []
    if kafka_ts is None:
        if ts is not None and ts >= 0:
            kafka_ts = ts
        else:
            kafka_ts = -1
            if ts is not None:
                engine.append(("ttl.ts", str(ts).encode()))
    elif ts is not None:
        engine.append(("ttl.ts", str(ts).encode()))
    if ttl is not None:
        engine.append(("ttl.ttl", str(ttl).encode()))
    return InputRecord(key, value, kafka_ts, tuple(headers) + tuple(engine), 0, offset)


def delete(key: bytes = b"k", ts: int = W, **kw) -> InputRecord:
    return rec(key, None, ts, **kw)


def seq(*records: InputRecord) -> list[InputRecord]:
    """Give records increasing offsets in the order written."""
    return [dataclasses.replace(r, offset=i) for i, r in enumerate(records)]


_next_offset = itertools.count(1_000)


def apply(store: ReferenceStore, *records: InputRecord, wall: int = W):
    """Apply one batch, offsets continuing across batches of a test."""
    return store.apply_batch(
        [dataclasses.replace(r, offset=next(_next_offset)) for r in records], wall)


def reason(r: InputRecord, sem: Semantics = DEFAULT, wall: int = W, t0: int = W) -> str:
    checked = validate(r, wall, t0, sem)
    assert isinstance(checked, Rejection), f"expected a rejection, got {checked}"
    return checked.reason


def accepted(r: InputRecord, sem: Semantics = DEFAULT, wall: int = W, t0: int = W):
    checked = validate(r, wall, t0, sem)
    assert not isinstance(checked, Rejection), f"unexpected rejection: {checked}"
    return checked


# --- puts, late records, ties ------------------------------------------------------------------

def test_put_keeps_max_timestamp_under_update():
    store = ReferenceStore(Semantics(late_records="update"))
    apply(store, rec(value=b"new", ts=W + 10, headers=(("h", b"1"),)))
    result = apply(store, rec(value=b"old", ts=W - 10, headers=(("h", b"2"),)))
    entry = store.entries[b"k"]
    assert (entry.value, entry.ts, entry.headers) == (b"old", W + 10, (("h", b"2"),))
    assert result.counts.upserted == 1 and result.counts.late_dropped == 0


def test_put_keeps_max_timestamp_within_one_batch():
    store = ReferenceStore(Semantics())
    apply(store, rec(value=b"1", ts=W + 5), rec(value=b"2", ts=W - 5), rec(value=b"3", ts=W))
    assert (store.entries[b"k"].value, store.entries[b"k"].ts) == (b"3", W + 5)


def test_late_put_is_dropped_under_drop_policy():
    store = ReferenceStore(Semantics(late_records="drop"))
    apply(store, rec(value=b"new", ts=W + 10))
    result = apply(store, rec(value=b"old", ts=W + 9))
    assert (store.entries[b"k"].value, store.entries[b"k"].ts) == (b"new", W + 10)
    assert result.counts.late_dropped == 1 and result.counts.upserted == 0
    assert result.outcomes[0].changed is False


def test_late_delete_is_dropped_under_drop_policy():
    store = ReferenceStore(Semantics(late_records="drop"))
    apply(store, rec(ts=W + 10))
    result = apply(store, delete(ts=W + 9))
    assert b"k" in store.entries
    assert result.counts.late_dropped == 1 and result.counts.deleted == 0


def test_late_check_ignores_an_expired_entry():
    """Under "drop", an expired-but-unswept entry cannot make a record late."""
    store = ReferenceStore(Semantics(ttl=10, late_records="drop"))
    apply(store, rec(value=b"old", ts=W + 5))  # expires at W + 15
    apply(store, rec(value=b"new", ts=W + 1, ttl=1_000), wall=W + 20)
    assert (store.entries[b"k"].value, store.entries[b"k"].ts) == (b"new", W + 1)


@pytest.mark.parametrize("policy", ["update", "drop"])
def test_tie_goes_to_later_arrival(policy):
    store = ReferenceStore(Semantics(late_records=policy))
    result = apply(store, rec(value=b"first", ts=W), rec(value=b"second", ts=W))
    assert store.entries[b"k"].value == b"second"
    assert result.counts.upserted == 2
    result = apply(store, rec(value=b"third", ts=W))
    assert store.entries[b"k"].value == b"third"


def test_tie_lets_a_delete_through_under_drop_policy():
    store = ReferenceStore(Semantics(late_records="drop"))
    apply(store, rec(ts=W))
    result = apply(store, delete(ts=W))
    assert store.entries == {} and result.counts.deleted == 1


def test_records_of_a_key_apply_in_offset_order_not_list_order():
    store = ReferenceStore(Semantics())
    records = [rec(value=b"second", offset=2), rec(value=b"first", offset=1)]
    store.apply_batch(records, W)
    assert store.entries[b"k"].value == b"second"


# --- expiry on arrival, expired entries --------------------------------------------------------

def test_expired_entry_counts_as_absent_for_puts():
    store = ReferenceStore(Semantics(ttl=10))
    apply(store, rec(value=b"old", ts=W + 5))  # expires at W + 15
    apply(store, rec(value=b"new", ts=W + 1, ttl=1_000), wall=W + 20)
    entry = store.entries[b"k"]
    # not max(W + 5, W + 1): the expired entry's ts is not carried over
    assert (entry.ts, entry.expires_at) == (W + 1, W + 1_001)


def test_expired_on_arrival_removes_live_entry_as_expiry():
    store = ReferenceStore(Semantics(ttl=100))
    apply(store, rec(value=b"live", ts=W))  # expires at W + 100
    # ts = max(W, W - 200) = W under "update"; W + 10 <= T0 = W + 50: expired on arrival
    result = apply(store, rec(value=b"short", ts=W - 200, ttl=10), wall=W + 50)
    assert store.entries == {}
    assert result.counts.expired_on_arrival == 1 and result.counts.upserted == 0
    (outcome,) = result.outcomes
    assert (outcome.final, outcome.had_row, outcome.changed, outcome.removal_op) == (
        None, True, True, "expire")


def test_expired_on_arrival_on_absent_key_stores_and_publishes_nothing():
    store = ReferenceStore(Semantics(ttl=10))
    result = apply(store, rec(ts=W - 10))  # expires_at == T0: expired (<=)
    assert store.entries == {}
    (outcome,) = result.outcomes
    assert (outcome.had_row, outcome.changed, outcome.removal_op) == (False, False, None)
    assert result.counts.expired_on_arrival == 1


def test_put_expiring_one_ms_after_t0_is_stored():
    store = ReferenceStore(Semantics(ttl=10))
    apply(store, rec(ts=W - 9))
    assert store.entries[b"k"].expires_at == W + 1


def test_expired_on_arrival_removes_expired_but_unswept_row_as_expiry():
    """Rules silent; model decision: the stale row goes, published as an expiry."""
    store = ReferenceStore(Semantics(ttl=10))
    apply(store, rec(ts=W))
    result = apply(store, rec(ts=W - 100), wall=W + 50)
    assert store.entries == {} and result.outcomes[0].removal_op == "expire"


def test_put_after_expired_on_arrival_in_same_batch_is_written():
    store = ReferenceStore(Semantics(ttl=100))
    apply(store, rec(value=b"a", ts=W))
    result = apply(store, rec(value=b"b", ts=W, ttl=1), rec(value=b"c", ts=W - 5), wall=W + 10)
    # after the expiry the key is absent, so "c" keeps its own ts (no max with the gone row)
    assert (store.entries[b"k"].value, store.entries[b"k"].ts) == (b"c", W - 5)
    assert (result.counts.expired_on_arrival, result.counts.upserted) == (1, 1)


# --- deletes ------------------------------------------------------------------------------------

def test_delete_of_absent_key_is_counted_and_changes_nothing():
    store = ReferenceStore(Semantics())
    result = apply(store, delete())
    assert store.entries == {}
    assert result.counts.delete_absent == 1 and result.counts.deleted == 0
    (outcome,) = result.outcomes
    assert (outcome.final, outcome.had_row, outcome.changed, outcome.removal_op) == (
        None, False, False, None)


def test_delete_of_live_key_is_published_as_delete():
    store = ReferenceStore(Semantics())
    apply(store, rec())
    result = apply(store, delete(ts=W - 1_000))  # a delete's ts is irrelevant under "update"
    assert store.entries == {} and result.counts.deleted == 1
    assert result.outcomes[0].removal_op == "delete"


def test_delete_removes_expired_but_unswept_row():
    store = ReferenceStore(Semantics(ttl=10))
    apply(store, rec(ts=W))
    result = apply(store, delete(), wall=W + 100)
    assert store.entries == {}
    assert result.counts.deleted == 1 and result.counts.delete_absent == 0
    assert result.outcomes[0].removal_op == "delete"


def test_second_delete_in_a_batch_finds_the_key_absent():
    store = ReferenceStore(Semantics())
    apply(store, rec())
    result = apply(store, delete(), delete())
    assert (result.counts.deleted, result.counts.delete_absent) == (1, 1)


def test_put_then_delete_in_one_batch_leaves_nothing():
    store = ReferenceStore(Semantics())
    result = apply(store, rec(), delete())
    assert store.entries == {}
    assert (result.counts.upserted, result.counts.deleted) == (1, 1)


# --- TTLs ---------------------------------------------------------------------------------------

def test_per_record_ttl_not_inherited_by_later_put():
    store = ReferenceStore(Semantics(ttl=100))
    apply(store, rec(ts=W, ttl=5_000))
    assert (store.entries[b"k"].expires_at, store.entries[b"k"].record_ttl) == (W + 5_000, 5_000)
    apply(store, rec(ts=W + 1))
    assert (store.entries[b"k"].expires_at, store.entries[b"k"].record_ttl) == (W + 101, None)


def test_per_record_ttl_applies_without_a_store_ttl():
    store = ReferenceStore(Semantics(ttl=None))
    apply(store, rec(ts=W, ttl=7), rec(key=b"j", ts=W))
    assert store.entries[b"k"].expires_at == W + 7
    assert store.entries[b"j"].expires_at is None


def test_expires_at_saturates_at_int64_max():
    store = ReferenceStore(Semantics(ttl=INT64_MAX, max_future=NO_LIMIT))
    apply(store, rec(key=b"a", ts=W), rec(key=b"b", ts=INT64_MAX - 1, ttl=2),
          rec(key=b"c", ts=INT64_MAX, ttl=INT64_MAX), rec(key=b"d", ts=-1))
    assert {k: e.expires_at for k, e in store.entries.items()} == {
        b"a": INT64_MAX, b"b": INT64_MAX, b"c": INT64_MAX, b"d": INT64_MAX - 1}
    assert set(store.live(INT64_MAX - 2)) == {b"a", b"b", b"c", b"d"}
    assert set(store.live(INT64_MAX - 1)) == {b"a", b"b", b"c"}
    assert sorted(store.sweep(INT64_MAX)) == [b"a", b"b", b"c", b"d"]


def test_ts_near_int64_min_plus_ttl_does_not_wrap():
    store = ReferenceStore(Semantics(ttl=1), clock="stream")  # stream time unset: nothing expires
    apply(store, rec(ts=INT64_MIN + 1))
    assert store.entries[b"k"].expires_at == INT64_MIN + 2


# --- timestamps ---------------------------------------------------------------------------------

def test_negative_timestamps_are_ordinary():
    store = ReferenceStore(Semantics(ttl=None))
    apply(store, rec(ts=-10, value=b"1"), rec(ts=-20, value=b"2"), rec(key=b"j", ts=-(2**62)))
    assert (store.entries[b"k"].value, store.entries[b"k"].ts) == (b"2", -10)
    assert store.entries[b"j"].ts == -(2**62)
    assert store.stream_time.value == -10


def test_negative_timestamp_with_ttl_expires_by_wall_clock():
    store = ReferenceStore(Semantics(ttl=DAY_MS))
    result = apply(store, rec(ts=-1))
    assert store.entries == {} and result.counts.expired_on_arrival == 1


def test_ttl_ts_minus_one_is_a_real_timestamp_not_missing():
    store = ReferenceStore(Semantics(missing_timestamp="reject"))
    apply(store, rec(ts=-1, kafka_ts=-1))
    assert store.entries[b"k"].ts == -1


def test_ttl_ts_wins_over_kafka_timestamp():
    assert accepted(rec(ts=W - 7, kafka_ts=W + 7)).ts == W - 7
    assert accepted(rec(ts=W - 7, kafka_ts=-1)).ts == W - 7


def test_no_timestamp_is_never_stored():
    """``ttl.ts = -2^63`` is "missing": rejected, or T0 under "ingest_time"."""
    sentinel = (("ttl.ts", b"-9223372036854775808"),)
    store = ReferenceStore(Semantics(missing_timestamp="reject"))
    result = apply(store, InputRecord(b"k", b"v", W, sentinel))
    assert store.entries == {} and result.counts.rejected == Counter({MISSING_TIMESTAMP: 1})
    assert store.stream_time.value is None
    store = ReferenceStore(Semantics(missing_timestamp="ingest_time"))
    apply(store, InputRecord(b"k", b"v", W, sentinel), wall=W + 3)
    assert store.entries[b"k"].ts == W + 3


@pytest.mark.parametrize("policy", ["reject", "ingest_time"])
def test_kafka_timestamp_equal_to_no_timestamp_is_never_stored(policy):
    """docs/semantics.md (Data model): ts is "never the sentinel", whatever carries it.

    §3 defines "missing" as ``ttl.ts = -2^63`` or Kafka timestamp -1; a Kafka timestamp of
    -2^63 (no ``ttl.ts``) is neither, yet storing it would put the sentinel in the table.
    """
    store = ReferenceStore(Semantics(missing_timestamp=policy))
    apply(store, InputRecord(b"k", b"v", NO_TIMESTAMP, ()))
    assert all(e.ts != NO_TIMESTAMP for e in store.entries.values()), store.entries


def test_kafka_timestamp_none_counts_as_missing():
    assert reason(InputRecord(b"k", b"v", None, ())) == MISSING_TIMESTAMP


def test_far_future_limit_is_inclusive_and_saturates():
    sem = Semantics(max_future=DAY_MS)
    assert accepted(rec(ts=W + DAY_MS), sem).ts == W + DAY_MS
    assert reason(rec(ts=W + DAY_MS + 1), sem) == FUTURE_TIMESTAMP
    # wall + max_future beyond int64 must not wrap into a negative limit
    assert accepted(rec(ts=INT64_MAX), sem, wall=INT64_MAX - 5, t0=INT64_MAX - 5).ts == INT64_MAX


# --- missing timestamps under "ingest_time" ------------------------------------------------------

def missing(key: bytes = b"k") -> InputRecord:
    return InputRecord(key, b"v", -1, ())


def test_missing_timestamp_is_rejected_by_default():
    store = ReferenceStore(Semantics())
    result = apply(store, missing())
    assert result.counts.rejected == Counter({MISSING_TIMESTAMP: 1}) and store.entries == {}
    assert result.rejections[0].record.key == b"k"


@pytest.mark.parametrize(("clock", "stream", "wall", "expected"), [
    ("wall", None, W, W),
    ("wall", W + 50, W, W),
    ("stream", W - 50, W, W - 50),
    ("stream", None, W, W),  # stream time unset: T0 is -2^63, so the wall clock is used
    ("both", W - 50, W, W),
    ("both", W + 50, W, W + 50),
    ("both", None, W, W),
])
def test_ingest_time_uses_t0(clock, stream, wall, expected):
    store = ReferenceStore(Semantics(missing_timestamp="ingest_time"), clock, stream_time=stream)
    result = store.apply_batch([missing()], wall)
    assert store.entries[b"k"].ts == expected
    assert result.t0 == (NO_TIMESTAMP if clock == "stream" and stream is None else expected)
    assert store.stream_time.value == max(expected, stream if stream is not None else expected)


def test_ingest_time_record_is_not_expired_on_arrival_with_a_positive_ttl():
    store = ReferenceStore(Semantics(ttl=1, missing_timestamp="ingest_time"))
    apply(store, missing())
    assert store.entries[b"k"].expires_at == W + 1


# --- stream time and T0 -------------------------------------------------------------------------

def test_stream_time_is_unset_until_the_first_valid_record():
    store = ReferenceStore(Semantics(), clock="stream")
    assert apply(store).stream_time is None
    assert apply(store, missing(), rec(key=None), rec(ts=W + 2 * DAY_MS)).stream_time is None
    assert apply(store, rec(ts=W)).stream_time == W


def test_stream_time_ignores_rejected_records():
    store = ReferenceStore(Semantics(max_value_bytes=2))
    result = apply(store, rec(ts=W), rec(ts=W + 2 * DAY_MS), rec(ts=W + 10, value=b"big"),
                   rec(ts=W + 20, headers=(("ttl.bogus", b"1"),)))
    assert result.stream_time == W
    assert sum(result.counts.rejected.values()) == 3


def test_stream_time_includes_late_expired_and_delete_records():
    store = ReferenceStore(Semantics(ttl=10, late_records="drop"), stream_time=W)
    apply(store, rec(ts=W + 100))
    assert apply(store, rec(ts=W + 90)).counts.late_dropped == 1  # lower: no change
    assert store.stream_time.value == W + 100
    late = apply(store, rec(ts=W + 110), rec(ts=W + 105))
    assert late.counts.late_dropped == 1 and late.stream_time == W + 110
    expired = apply(store, rec(key=b"x", ts=W + 120), wall=W + 500)
    assert expired.counts.expired_on_arrival == 1 and expired.stream_time == W + 120
    absent = apply(store, delete(key=b"y", ts=W + 130))
    assert absent.counts.delete_absent == 1 and absent.stream_time == W + 130


def test_stream_time_never_decreases():
    store = ReferenceStore(Semantics(), stream_time=W)
    assert apply(store, rec(ts=W - 1_000), rec(ts=-5)).stream_time == W
    assert apply(store, rec(ts=INT64_MIN + 1)).stream_time == W
    assert StreamTime(W).advance(None) == W
    assert StreamTime(W).advance(NO_TIMESTAMP) == W


@pytest.mark.parametrize(("clock", "stream", "expected"), [
    ("wall", None, W), ("wall", W + 9, W),
    ("stream", None, NO_TIMESTAMP), ("stream", W - 9, W - 9), ("stream", W + 9, W + 9),
    ("both", None, W), ("both", W - 9, W), ("both", W + 9, W + 9),
])
def test_t0_for_each_clock(clock, stream, expected):
    assert batch_clock(clock, W, stream) == expected
    store = ReferenceStore(Semantics(), clock, stream_time=stream)
    assert store.apply_batch([], W).t0 == expected


def test_t0_is_stream_time_before_the_batch():
    store = ReferenceStore(Semantics(ttl=10), clock="stream")
    apply(store, rec(key=b"a", ts=W))
    # T0 = W; b expires at W + 5 > W although c raises stream time to W + 1000 in this batch
    result = apply(store, rec(key=b"b", ts=W - 5), rec(key=b"c", ts=W + 1_000), wall=W)
    assert result.t0 == W and b"b" in store.entries and result.stream_time == W + 1_000
    result = apply(store, rec(key=b"b", ts=W - 5), wall=W)
    assert result.counts.expired_on_arrival == 1
    assert set(store.live(result.stream_time)) == {b"c"}


def test_unset_stream_time_expires_nothing():
    store = ReferenceStore(Semantics(ttl=1), clock="stream")
    apply(store, rec(ts=-(2**62)))
    assert b"k" in store.entries
    store = ReferenceStore(Semantics(ttl=1), clock="wall")
    apply(store, rec(ts=-(2**62)))
    assert store.entries == {}


# --- validation ---------------------------------------------------------------------------------

SMALL = Semantics(max_value_bytes=4, max_headers_bytes=16, max_record_bytes=542)
FAULTS = {  # one per reason code, in the documented order; each turns a good record into a bad one
    NULL_KEY: lambda r: dataclasses.replace(r, key=None),
    BAD_ENGINE_HEADER: lambda r: dataclasses.replace(r, headers=(*r.headers, ("ttl.x", b"1"))),
    BAD_HEADER_KEY: lambda r: dataclasses.replace(r, headers=(("n\ufffd", b"1"), *r.headers)),
    MISSING_TIMESTAMP: lambda r: dataclasses.replace(r, timestamp=-1),
    FUTURE_TIMESTAMP: lambda r: dataclasses.replace(r, timestamp=W + DAY_MS + 1),
    VALUE_TOO_LARGE: lambda r: dataclasses.replace(r, value=b"12345"),
    HEADERS_TOO_LARGE: lambda r: dataclasses.replace(r, headers=(("big", b"x" * 20), *r.headers)),
    TOO_LARGE_TO_PUBLISH: lambda r: dataclasses.replace(r, key=b"k" * 200),
}


def test_reasons_are_listed_in_the_documented_order():
    assert REASONS == tuple(FAULTS)


def test_a_good_record_passes():
    checked = accepted(rec(value=b"1234", headers=(("h", b"1"),)), SMALL)
    assert (checked.key, checked.value, checked.ts, checked.headers) == (
        b"k", b"1234", W, (("h", b"1"),))


@pytest.mark.parametrize("code", list(FAULTS))
def test_each_reason_code_on_its_own(code):
    assert reason(FAULTS[code](rec(value=b"1234")), SMALL) == code


COMBINATIONS = [
    combo for n in range(2, len(FAULTS) + 1) for combo in itertools.combinations(FAULTS, n)
    # a record has a timestamp or not: "missing" and "future" cannot both apply
    if not {MISSING_TIMESTAMP, FUTURE_TIMESTAMP} <= set(combo)
]


@pytest.mark.parametrize("combo", COMBINATIONS, ids="+".join)
def test_first_failing_rule_wins(combo):
    record = rec(value=b"1234")
    for code in reversed(combo):
        record = FAULTS[code](record)
    assert reason(record, SMALL) == combo[0]


def test_null_key_wins_over_everything():
    record = InputRecord(None, b"x" * 100, -1, (("ttl.ts", b"+1"), ("ttl.ts", b"1")))
    assert reason(record, SMALL) == NULL_KEY


def test_empty_key_and_empty_value_are_ordinary():
    store = ReferenceStore(Semantics())
    result = apply(store, rec(key=b"", value=b""))
    assert store.entries[b""].value == b"" and result.counts.upserted == 1


def test_size_limits_are_inclusive():
    assert accepted(rec(value=b"1234"), SMALL)
    assert accepted(rec(headers=(("k" * 8, b"x" * 8),)), SMALL)
    assert reason(rec(headers=(("k" * 8, b"x" * 9),)), SMALL) == HEADERS_TOO_LARGE
    assert accepted(delete(), Semantics(max_value_bytes=1))
    # key + value + headers (+10 each) + 512 of changelog framing <= max_record_bytes (542)
    assert accepted(rec(key=b"k" * 26, value=b"1234"), SMALL)
    assert reason(rec(key=b"k" * 27, value=b"1234"), SMALL) == TOO_LARGE_TO_PUBLISH
    assert accepted(rec(key=b"k" * 15, value=b"1", headers=(("h", b""),)), SMALL)
    assert reason(rec(key=b"k" * 15, value=b"1", headers=(("h", b""),) * 2),
                  SMALL) == TOO_LARGE_TO_PUBLISH  # 15 + 1 + 2 * (1 + 10) + 512 = 550
    assert accepted(delete(key=b"k" * 30), SMALL)
    assert reason(delete(key=b"k" * 31), SMALL) == TOO_LARGE_TO_PUBLISH  # a tombstone too


@pytest.mark.parametrize(("raw", "expected"), [
    (b"0", 0), (b"1", 1), (b"-1", -1), (b"-0", 0), (b"01", 1),
    (b"0000000000000000001", 1),  # 19 digits
    (b"9223372036854775807", INT64_MAX), (b"-9223372036854775808", INT64_MIN),
    *[(raw, None) for raw in MALFORMED_VALUES],
    (b"00000000000000000001", None),  # 20 digits, even though the value is small
    (b"9999999999999999999", None),  # 19 digits, beyond int64
])
def test_engine_header_values(raw, expected):
    assert parse_engine_int(raw) == expected


@pytest.mark.parametrize("raw", MALFORMED_VALUES)
@pytest.mark.parametrize("name", ["ttl.ts", "ttl.ttl"])
def test_malformed_engine_header_rejects_the_record(name, raw):
    assert reason(InputRecord(b"k", b"v", W, ((name, raw),))) == BAD_ENGINE_HEADER


@pytest.mark.parametrize(("raw", "ts"), [
    (b"-0", 0), (b"01", 1), (b"-1", -1), (b"0", 0), (b"9223372036854775807", INT64_MAX),
    (b"-9223372036854775807", INT64_MIN + 1),
])
def test_ttl_ts_header_edge_values(raw, ts):
    checked = accepted(InputRecord(b"k", b"v", -1, (("ttl.ts", raw),)),
                       Semantics(max_future=NO_LIMIT))
    assert checked.ts == ts and checked.headers == ()


@pytest.mark.parametrize(("raw", "ok"), [
    (b"1", True), (b"01", True), (b"9223372036854775807", True),
    (b"0", False), (b"-0", False), (b"-1", False), (b"-9223372036854775808", False),
])
def test_ttl_ttl_must_be_positive(raw, ok):
    record = InputRecord(b"k", b"v", W, (("ttl.ttl", raw),))
    if ok:
        assert accepted(record).record_ttl == int(raw)
    else:
        assert reason(record) == BAD_ENGINE_HEADER


@pytest.mark.parametrize("name", UNKNOWN_ENGINE_HEADERS)
def test_unknown_engine_header_rejects_the_record(name):
    assert reason(rec(headers=((name, b"1"),))) == BAD_ENGINE_HEADER


@pytest.mark.parametrize("name", ["ttl.ts", "ttl.ttl"])
@pytest.mark.parametrize("values", [(b"5", b"5"), (b"5", b"6")])
def test_same_engine_header_twice_rejects_the_record(name, values):
    headers = ((name, values[0]), ("h", b"between"), (name, values[1]))
    assert reason(rec(headers=headers)) == BAD_ENGINE_HEADER


def test_user_headers_keep_order_duplicates_and_nulls_and_lose_engine_headers():
    headers = (("h", b"1"), ("ttl.ts", b"-5"), ("TTL.ts", b"x"), ("h", None), ("ttl", b"y"),
               ("ttl.ttl", b"9"), ("", b""), ("h", b"1"))
    checked = accepted(InputRecord(b"k", b"v", -1, headers))
    assert checked.headers == (("h", b"1"), ("TTL.ts", b"x"), ("h", None), ("ttl", b"y"),
                               ("", b""), ("h", b"1"))
    assert (checked.ts, checked.record_ttl) == (-5, 9)


def test_rejection_keeps_the_original_record():
    record = InputRecord(b"k", b"v", W, (("ttl.ts", b"bad"), ("h", None)), 3, 42)
    store = ReferenceStore(Semantics())
    (rejection,) = store.apply_batch([record], W).rejections
    assert rejection.record == record and rejection.reason == BAD_ENGINE_HEADER
    assert rejection.detail


# --- sweeps and reads ---------------------------------------------------------------------------

def test_sweep_is_exact_and_idempotent():
    store = ReferenceStore(Semantics(ttl=None))
    apply(store, rec(key=b"a", ttl=10), rec(key=b"b", ttl=11), rec(key=b"c"))
    assert set(store.live(W + 10)) == {b"b", b"c"}
    assert set(store.entries) == {b"a", b"b", b"c"}  # reads hide, they do not delete
    assert store.sweep(W + 10) == [b"a"]
    assert store.sweep(W + 10) == []
    assert set(store.entries) == {b"b", b"c"}


# --- the independent re-statement ---------------------------------------------------------------

def naive_int(raw: bytes | None) -> int | None:
    """docs/semantics.md (Write semantics): ASCII decimal ``^-?[0-9]{1,19}$`` within int64."""
    if raw is None:
        return None
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return None
    digits = text[1:] if text.startswith("-") else text
    if not 1 <= len(digits) <= 19 or any(c not in "0123456789" for c in digits):
        return None
    n = int(text)
    return n if -(2**63) <= n <= 2**63 - 1 else None


class Naive:
    """docs/semantics.md one record at a time, in arrival order (= offset order for each key).

    T0 is ``None`` while an unset stream time is the clock: then nothing is expired.
    """

    def __init__(self, sem: Semantics, clock: str, stream_time: int | None = None) -> None:
        self.sem, self.clock = sem, clock
        self.rows: dict[bytes, Entry] = {}
        self.stream_time = stream_time

    def expired(self, expires_at: int | None, t0: int | None) -> bool:
        return expires_at is not None and t0 is not None and expires_at <= t0

    def check(self, r: InputRecord, wall: int, t0: int | None):
        """(ts, ttl, user headers), or the reason code of the first failing rule."""
        if r.key is None:
            return NULL_KEY
        engine: dict[str, int] = {}
        user = []
        for name, raw in r.headers:
            if not name.startswith("ttl."):
                user.append((name, raw))
                continue
            if name not in ("ttl.ts", "ttl.ttl") or name in engine:
                return BAD_ENGINE_HEADER
            n = naive_int(raw)
            if n is None or (name == "ttl.ttl" and n <= 0):
                return BAD_ENGINE_HEADER
            engine[name] = n
        if any("\ufffd" in k for k, _ in user):  # non-UTF-8 bytes, as Java decodes them
            return BAD_HEADER_KEY
        if "ttl.ts" in engine:
            ts, is_missing = engine["ttl.ts"], engine["ttl.ts"] == -(2**63)
        else:
            ts, is_missing = r.timestamp, r.timestamp in (-1, None)
        if is_missing:
            if self.sem.missing_timestamp == "reject":
                return MISSING_TIMESTAMP
            ts = wall if t0 is None else t0
        if ts - wall > self.sem.max_future:
            return FUTURE_TIMESTAMP
        if r.value is not None and len(r.value) > self.sem.max_value_bytes:
            return VALUE_TOO_LARGE
        # the rules name no measure; this one (UTF-8 name + value bytes) is the model's
        if sum(len(k.encode()) + len(v or b"") for k, v in r.headers) > \
                self.sem.max_headers_bytes:
            return HEADERS_TOO_LARGE
        # the changelog record: key, value, user headers with 10 bytes of varints each,
        # and 512 bytes for the engine's headers and the record's framing
        if len(r.key) + len(r.value or b"") + sum(len(k.encode()) + len(v or b"") + 10
                                                  for k, v in user) + 512 > \
                self.sem.max_record_bytes:
            return TOO_LARGE_TO_PUBLISH
        return ts, engine.get("ttl.ttl"), tuple(user)

    def apply(self, key: bytes, value: bytes | None, ts: int, ttl: int | None, headers,
              t0: int | None) -> str:
        row = self.rows.get(key)
        live = row if row is not None and not self.expired(row.expires_at, t0) else None
        if self.sem.late_records == "drop" and live is not None and ts < live.ts:
            return "late_dropped"
        if value is None:
            if row is None:
                return "delete_absent"
            del self.rows[key]
            return "deleted"
        if live is not None and self.sem.late_records == "update":
            ts = max(ts, live.ts)
        effective = ttl if ttl is not None else self.sem.ttl
        expires_at = None if effective is None else min(ts + effective, 2**63 - 1)
        if self.expired(expires_at, t0):
            self.rows.pop(key, None)
            return "expired_on_arrival"
        self.rows[key] = Entry(value, ts, headers, expires_at, ttl)
        return "upserted"

    def batch(self, records: list[InputRecord], wall: int) -> tuple[int | None, Counter]:
        if self.clock == "wall":
            t0 = wall
        elif self.clock == "stream":
            t0 = self.stream_time
        else:
            t0 = wall if self.stream_time is None else max(wall, self.stream_time)
        tally: Counter = Counter()
        seen = []
        for r in records:
            checked = self.check(r, wall, t0)
            if isinstance(checked, str):
                tally["rejected:" + checked] += 1
                continue
            ts, ttl, headers = checked
            seen.append(ts)
            tally[self.apply(r.key, r.value, ts, ttl, headers, t0)] += 1
        if seen:
            prior = [] if self.stream_time is None else [self.stream_time]
            self.stream_time = max(seen + prior)
        return t0, tally


def tally_of(counts: Counts) -> Counter:
    out = Counter({name: getattr(counts, name) for name in (
        "upserted", "deleted", "delete_absent", "late_dropped", "expired_on_arrival")})
    out.update({"rejected:" + r: n for r, n in counts.rejected.items()})
    return +out


def test_naive_interpreter_agrees_on_a_hand_written_run():
    """A sanity check of the checker itself on a run whose outcome is known."""
    sem = Semantics(ttl=100, late_records="drop")
    naive = Naive(sem, "wall")
    t0, tally = naive.batch(seq(rec(ts=W + 10), rec(ts=W + 5), rec(key=b"j", ttl=1, ts=W - 1),
                                delete(key=b"z"), rec(key=None)), W)
    assert t0 == W
    assert tally == Counter({"upserted": 1, "late_dropped": 1, "expired_on_arrival": 1,
                             "delete_absent": 1, "rejected:null_key": 1})
    assert naive.rows == {b"k": Entry(b"v", W + 10, (), W + 110, None)}


# --- properties ---------------------------------------------------------------------------------

def run_batches(sem: Semantics, clock: str, run: list[Batch]):
    """Apply ``run`` to a ReferenceStore, yielding (batch, entries before, result) per batch."""
    store = ReferenceStore(sem, clock)
    for batch in run:
        before = dict(store.entries)
        result = store.apply_batch(batch.records, batch.wall_ms)
        yield store, batch, before, result


@settings(max_examples=500, deadline=None)
@given(sem=semantics(), clock=CLOCKS, run=batches())
def test_model_equals_naive_interpreter_after_every_batch(sem, clock, run):
    naive = Naive(sem, clock)
    for store, batch, _, result in run_batches(sem, clock, run):
        t0, tally = naive.batch(batch.records, batch.wall_ms)
        assert result.t0 == (NO_TIMESTAMP if t0 is None else t0)
        assert tally_of(result.counts) == +tally
        assert store.entries == naive.rows
        assert store.stream_time.value == naive.stream_time


@settings(max_examples=200, deadline=None)
@given(sem=semantics(), clock=CLOCKS, run=batches())
def test_counts_add_up_to_the_batch_size(sem, clock, run):
    for _, batch, _, result in run_batches(sem, clock, run):
        c = result.counts
        assert c.records == len(batch.records)
        assert c.records == (c.upserted + c.deleted + c.delete_absent + c.late_dropped
                             + c.expired_on_arrival + sum(c.rejected.values()))
        assert set(c.rejected) <= set(REASONS)
        assert len(result.rejections) == sum(c.rejected.values())
        assert sum(o.counts.records for o in result.outcomes) == c.records - len(
            result.rejections)


@settings(max_examples=300, deadline=None)
@given(sem=semantics(), data=st.data())
def test_outcome_under_a_fixed_wall_clock_does_not_depend_on_batch_split(sem, data):
    records = data.draw(record_lists(W, max_size=25), label="records")
    cut = data.draw(splits(records), label="split")

    def outcome(parts: list[list[InputRecord]]):
        store = ReferenceStore(sem, "wall")
        total = Counts()
        for part in parts:
            total.add(store.apply_batch(part, W).counts)
        return store.entries, store.stream_time.value, total.as_dict()

    whole = outcome([records])
    assert outcome(cut) == whole
    assert outcome([[r] for r in records]) == whole


@settings(max_examples=300, deadline=None)
@given(sem=semantics(), clock=CLOCKS, run=batches())
def test_written_entries_are_live_at_t0_and_never_hold_no_timestamp(sem, clock, run):
    for store, _, before, result in run_batches(sem, clock, run):
        for outcome in result.outcomes:
            if outcome.final is not None and outcome.changed:
                assert outcome.final.live_at(result.t0)
            assert (outcome.final is None) == (outcome.key not in store.entries)
            if outcome.final is None and outcome.changed:
                assert outcome.had_row and outcome.removal_op in ("delete", "expire")
            if not outcome.changed:
                assert store.entries.get(outcome.key) == before.get(outcome.key)
        assert all(e.ts != NO_TIMESTAMP for e in store.entries.values())
        assert all(e.expires_at is None or e.expires_at >= e.ts for e in store.entries.values())


@settings(max_examples=300, deadline=None)
@given(sem=semantics().map(lambda s: dataclasses.replace(s, late_records="update")),
       clock=CLOCKS, run=batches())
def test_ts_of_a_key_that_stays_live_never_decreases_under_update(sem, clock, run):
    for store, _, before, result in run_batches(sem, clock, run):
        for outcome in result.outcomes:
            old, new = before.get(outcome.key), store.entries.get(outcome.key)
            stayed = outcome.counts.deleted == 0 and outcome.counts.expired_on_arrival == 0
            if old is not None and old.live_at(result.t0) and new is not None and stayed:
                assert new.ts >= old.ts


@settings(max_examples=300, deadline=None)
@given(sem=semantics(), clock=CLOCKS, run=batches(monotonic_wall=False))
def test_stream_time_never_decreases_and_covers_every_valid_record(sem, clock, run):
    previous = None
    for _, batch, _, result in run_batches(sem, clock, run):
        now = result.stream_time
        if previous is not None:
            assert now is not None and now >= previous
        rejected = {id(r.record) for r in result.rejections}
        valid = [r for r in batch.records if id(r) not in rejected]
        if valid:
            assert now is not None and now >= max(o.max_ts for o in result.outcomes)
        else:
            assert now == previous
        previous = now


@settings(max_examples=250, deadline=None)
@given(sem=semantics(), clock=CLOCKS, run=batches(), data=st.data())
def test_sweep_removes_exactly_the_expired_entries_and_live_hides_them(sem, clock, run, data):
    store = ReferenceStore(sem, clock)
    for batch in run:
        store.apply_batch(batch.records, batch.wall_ms)
    marks = sorted({e.expires_at for e in store.entries.values() if e.expires_at is not None})
    t = data.draw(st.one_of(
        st.sampled_from([m + d for m in marks for d in (-1, 0)] or [W]),
        st.sampled_from([INT64_MIN, INT64_MAX, W]), st.integers(INT64_MIN, INT64_MAX)),
        label="t")
    entries = dict(store.entries)
    expired = {k for k, e in entries.items() if e.expires_at is not None and e.expires_at <= t}
    assert store.live(t) == {k: e for k, e in entries.items() if k not in expired}
    assert store.entries == entries  # reading does not remove
    swept = copy.deepcopy(store)
    assert sorted(swept.sweep(t)) == sorted(expired)
    assert swept.entries == store.live(t)
    assert swept.sweep(t) == []
