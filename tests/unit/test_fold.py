"""The vectorized batch fold (``ttl.store.fold.fold_table``) equals the reference model.

``fold_table`` takes a key's one plain record through column expressions and every other
key through ``ttl.model.fold_batch``; these properties hold the combination equal to
``fold_batch`` on the whole batch, on generated records (a key pool wide enough that most
keys appear once, so both paths run in most examples) and generated stored rows (live,
expired-but-unswept, per-record TTLs, int64 edges), for every clock value T0. Pure Python +
pyarrow: no JVM. ``TTL_LONG=1`` runs many more examples.
"""

from __future__ import annotations

import os

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.strategies import (
    BASE_MS,
    TTLS,
    WIDE_KEYS,
    assign_offsets,
    record_lists,
    semantics,
    timestamps,
    user_headers,
)
from ttl.model import Semantics, fold_batch
from ttl.record import Entry, InputRecord
from ttl.store.fold import fold_table, records_table, stored_arrow_schema
from ttl.timestamps import INT64_MAX, INT64_MIN, NO_TIMESTAMP

EXAMPLES = 3000 if os.environ.get("TTL_LONG") else 300


@st.composite
def stored_rows(draw, records: list[InputRecord], t0: int,
                wall_ms: int = BASE_MS) -> dict[bytes, Entry]:
    """Stored rows of some keys (the batch's mostly): live, expired-but-unswept,
    never-expiring, expiring exactly at T0, edge values, and timestamps equal to a record's
    (ties)."""
    batch_keys = sorted({r.key for r in records if r.key is not None})
    pool = st.sampled_from(batch_keys) if batch_keys else st.sampled_from(WIDE_KEYS)
    keys = draw(st.lists(st.one_of(pool, st.sampled_from(WIDE_KEYS)), unique=True,
                         max_size=25))
    near = [r.timestamp for r in records if r.timestamp is not None] or [wall_ms]
    rows = {}
    for key in keys:
        ts = draw(st.one_of(st.tuples(st.sampled_from(near), st.sampled_from((0, 5, -5))).map(
            lambda p: min(INT64_MAX, max(INT64_MIN + 1, p[0] + p[1]))), timestamps(wall_ms)))
        expires_at = draw(st.one_of(
            st.none(), st.integers(-50, 50).map(lambda d: wall_ms + 5 * d),
            st.sampled_from((INT64_MAX, ts, max(t0 - 1, INT64_MIN), t0, t0 + 1))))
        record_ttl = draw(st.one_of(st.none(), st.sampled_from(TTLS)))
        rows[key] = Entry(b"", ts, (), expires_at, record_ttl)
    return rows


@st.composite
def batch_records(draw) -> list[InputRecord]:
    """The general generated records mixed with plain ones (a Kafka timestamp on the grid,
    user headers only, distinct keys mostly) and runs of plain puts on one key: the
    vectorized paths' common cases."""
    general = draw(record_lists(BASE_MS, keys=WIDE_KEYS, max_size=25))
    plain = draw(st.lists(st.builds(
        InputRecord, st.sampled_from(WIDE_KEYS),
        st.one_of(st.binary(min_size=1, max_size=6), st.none()),
        st.integers(-8, 8).map(lambda d: BASE_MS + 5 * d), user_headers), max_size=25))
    runs = [InputRecord(key, value, ts, headers)
            for key, puts in draw(st.lists(st.tuples(
                st.sampled_from(WIDE_KEYS), st.lists(st.tuples(
                    st.binary(min_size=1, max_size=6),
                    st.integers(-8, 8).map(lambda d: BASE_MS + 5 * d), user_headers),
                    min_size=2, max_size=4)), max_size=4))
            for value, ts, headers in puts]
    mixed = draw(st.permutations(general + plain + runs))
    return assign_offsets(mixed)


def _stored_table(rows: dict[bytes, Entry]):
    return pa.Table.from_pylist(
        [{"key": k, "ts": e.ts, "expires_at": e.expires_at, "record_ttl": e.record_ttl}
         for k, e in rows.items()], schema=stored_arrow_schema())


def _expected(records: list[InputRecord], rows: dict[bytes, Entry], wall_ms: int, t0: int,
              sem: Semantics):
    result = fold_batch(records, rows, wall_ms, t0, sem)
    changes = set()
    for out in result.outcomes:
        if out.changed and out.final is not None:
            e = out.final
            changes.add(("upsert", out.key, e.value, e.ts, e.headers, e.expires_at,
                         e.record_ttl, None))
        elif out.changed and out.had_row:
            changes.add(("delete", out.key, None, None, None, None, None, out.removal_op))
    rejects = [(j.record.partition, j.record.offset, j.reason, j.detail)
               for j in result.rejections]
    return result, changes, rejects


def _headers(raw):
    return None if raw is None else tuple((h["key"], h["value"]) for h in raw)


def _got_changes(folded) -> set:
    return {(r["kind"], r["key"], r["value"], r["ts"], _headers(r["headers"]), r["expires_at"],
             r["record_ttl"], r["removal_op"]) for r in folded.changes.to_pylist()}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(sem=semantics(), data=st.data(), t0=st.one_of(st.just(BASE_MS), timestamps(BASE_MS),
                                        st.just(NO_TIMESTAMP)))
def test_fold_table_equals_the_reference_model(sem, data, t0):
    records = data.draw(batch_records())
    rows = data.draw(stored_rows(records, t0))
    result, changes, rejects = _expected(records, rows, BASE_MS, t0, sem)
    folded = fold_table(records_table(records), _stored_table(rows), BASE_MS, t0, sem)
    assert folded.counts.as_dict() == result.counts.as_dict()
    assert folded.max_ts == result.stream_time
    assert _got_changes(folded) == changes
    assert [(r["source_partition"], r["source_offset"], r["reason"], r["detail"])
            for r in folded.rejects.to_pylist()] == rejects
    expired = {k.hex() for (kind, k, *_rest, op) in changes if op == "expire"}
    assert sorted(folded.expired_keys) == sorted(expired)
    upserts = [c for c in changes if c[0] == "upsert"]
    assert folded.upserted == len(upserts)
    assert folded.earliest_expiry == min((c[5] for c in upserts if c[5] is not None),
                                         default=None)
    assert folded.deleted + folded.expired == len(changes) - len(upserts)


@st.composite
def put_runs(draw) -> list[InputRecord]:
    """Several plain puts per key, timestamps on a grid around the clock: with TTLs of a
    few ms, some expire on arrival, some before or after a later put of the same key."""
    runs = draw(st.lists(st.tuples(st.sampled_from(WIDE_KEYS), st.lists(st.tuples(
        st.binary(min_size=1, max_size=3), st.integers(-8, 8).map(lambda d: BASE_MS + 5 * d)),
        min_size=1, max_size=5)), min_size=1, max_size=6))
    return assign_offsets(draw(st.permutations(
        [InputRecord(key, value, ts) for key, puts in runs for value, ts in puts])))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(ttl=st.sampled_from((None, 1, 5, 20, 100)), data=st.data())
def test_runs_of_plain_puts_equal_the_reference_model(ttl, data):
    sem = Semantics(ttl=ttl)
    records = data.draw(put_runs())
    rows = data.draw(stored_rows(records, BASE_MS))
    result, changes, _ = _expected(records, rows, BASE_MS, BASE_MS, sem)
    folded = fold_table(records_table(records), _stored_table(rows), BASE_MS, BASE_MS, sem)
    assert folded.vectorized == len(records)
    assert folded.counts.as_dict() == result.counts.as_dict()
    assert _got_changes(folded) == changes
    assert folded.max_ts == result.stream_time
    assert sorted(folded.expired_keys) == sorted(
        k.hex() for (kind, k, *_rest, op) in changes if op == "expire")


def test_plain_records_of_distinct_keys_take_the_vectorized_path():
    sem = Semantics(ttl=1_000, late_records="drop")
    records = [InputRecord(b"k%d" % i, b"v" if i % 4 else None, BASE_MS - i, (("h", b"1"),),
                           0, i) for i in range(100)]
    rows = {b"k%d" % i: Entry(b"", BASE_MS, (), BASE_MS + 10, None) for i in range(0, 100, 2)}
    folded = fold_table(records_table(records), _stored_table(rows), BASE_MS, BASE_MS, sem)
    assert folded.vectorized == 100
    result, changes, _ = _expected(records, rows, BASE_MS, BASE_MS, sem)
    assert _got_changes(folded) == changes
    assert folded.counts.as_dict() == result.counts.as_dict()
    assert folded.counts.late_dropped > 0 and folded.counts.upserted > 0


def test_runs_of_plain_puts_are_vectorized_the_rest_goes_to_the_model():
    sem = Semantics(ttl=None)
    records = [InputRecord(b"a", b"1", BASE_MS, (), 0, 0),
               InputRecord(b"a", b"2", BASE_MS - 5, (), 0, 1),
               InputRecord(b"b", b"1", BASE_MS, (("ttl.ttl", b"5"),), 0, 2),
               InputRecord(b"c", b"1", BASE_MS, (), 0, 3),
               InputRecord(b"d", b"1", BASE_MS, (), 0, 4),
               InputRecord(b"d", None, BASE_MS, (), 0, 5)]
    folded = fold_table(records_table(records), _stored_table({}), BASE_MS, BASE_MS, sem)
    assert folded.vectorized == 3  # a's run and c; b has an engine header, d a delete
    assert _got_changes(folded) == _expected(records, {}, BASE_MS, BASE_MS, sem)[1]
    assert folded.counts.as_dict() == _expected(records, {}, BASE_MS, BASE_MS, sem)[0] \
        .counts.as_dict()
