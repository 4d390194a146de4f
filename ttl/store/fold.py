"""The executor side of the batch write: ``validate`` and ``fold_key`` over Arrow batches.

Input rows arrive partitioned by key and sorted (key, existing row first, partition,
offset); the stored row of a key (if any) comes tagged ``is_existing``. Each key's rows are
folded by ``ttl.model.fold_key``, so the Spark path runs the very semantics the reference
model states. Output: one row per key whose table row must change (``upsert``/``delete``),
one per rejected record (``reject``), and one ``stats`` row per key with its counts.
"""

from __future__ import annotations

from collections.abc import Iterator

from ttl.model import (
    Semantics,
    fold_key,
    validate,
)
from ttl.record import Entry, InputRecord, Rejection, ValidRecord
from ttl.store.layout import HEADERS_TYPE, headers_arrow_type

FOLD_SCHEMA = (
    f"kind string, key binary, value binary, ts bigint, headers {HEADERS_TYPE}, "
    "expires_at bigint, record_ttl bigint, "
    "removal_op string, reason string, detail string, partition int, offset bigint, "
    "n_records bigint, n_upserted bigint, n_deleted bigint, n_delete_absent bigint, "
    "n_late_dropped bigint, n_expired_on_arrival bigint, max_ts bigint"
)

_FIELDS = [f.split(" ")[0] for f in
           "kind key value ts headers expires_at record_ttl removal_op reason detail partition "
           "offset n_records n_upserted n_deleted n_delete_absent n_late_dropped "
           "n_expired_on_arrival max_ts".split()]


def _headers(raw) -> tuple:
    return tuple((h["key"], h["value"]) for h in raw) if raw else ()


def _to_arrow_headers(headers) -> list[dict]:
    return [{"key": k, "value": v} for k, v in headers]


def _empty_row(kind: str, key) -> dict:
    row = dict.fromkeys(_FIELDS)
    row["kind"], row["key"] = kind, key
    return row


def _reject_row(rej: Rejection) -> dict:
    rec = rej.record
    row = _empty_row("reject", rec.key)
    row.update(value=rec.value, ts=rec.timestamp, headers=_to_arrow_headers(rec.headers),
               reason=rej.reason, detail=rej.detail, partition=rec.partition,
               offset=rec.offset, n_records=1)
    return row


def _outcome_rows(key: bytes, existing: Entry | None, valid: list[ValidRecord], t0: int,
                  sem: Semantics) -> list[dict]:
    out = fold_key(key, existing, valid, t0, sem)
    stats = _empty_row("stats", key)
    c = out.counts
    stats.update(n_records=c.records, n_upserted=c.upserted, n_deleted=c.deleted,
                 n_delete_absent=c.delete_absent, n_late_dropped=c.late_dropped,
                 n_expired_on_arrival=c.expired_on_arrival, max_ts=out.max_ts)
    rows = [stats]
    if not out.changed:
        return rows
    if out.final is None:
        if out.had_row:
            change = _empty_row("delete", key)
            change["removal_op"] = out.removal_op
            rows.append(change)
        return rows
    change = _empty_row("upsert", key)
    e = out.final
    change.update(value=e.value, ts=e.ts, headers=_to_arrow_headers(e.headers),
                  expires_at=e.expires_at, record_ttl=e.record_ttl)
    rows.append(change)
    return rows


def _fold_group(rows: list[dict], wall_ms: int, t0: int, sem: Semantics) -> list[dict]:
    """One key's rows (the stored row first, if any) -> output rows."""
    existing = None
    out: list[dict] = []
    valid: list[ValidRecord] = []
    for r in rows:
        if r["is_existing"]:
            existing = Entry(r["value"], r["timestamp"], _headers(r["headers"]),
                             r["expires_at"], r["record_ttl"])
            continue
        rec = InputRecord(r["key"], r["value"], r["timestamp"], _headers(r["headers"]),
                          r["partition"], r["offset"])
        checked = validate(rec, wall_ms, t0, sem)
        if isinstance(checked, Rejection):
            out.append(_reject_row(checked))
        else:
            valid.append(checked)
    if valid:
        out.extend(_outcome_rows(valid[0].key, existing, valid, t0, sem))
    return out


def _arrow_schema():
    """FOLD_SCHEMA as Arrow types (executors have no SparkSession to parse DDL with)."""
    import pyarrow as pa

    types = {"kind": pa.string(), "key": pa.binary(), "value": pa.binary(), "ts": pa.int64(),
             "headers": headers_arrow_type(), "expires_at": pa.int64(), "record_ttl": pa.int64(),
             "removal_op": pa.string(), "reason": pa.string(), "detail": pa.string(),
             "partition": pa.int32(), "offset": pa.int64()}
    return pa.schema([(name, types.get(name, pa.int64())) for name in _FIELDS])


def fold_partition(batches: Iterator, *, wall_ms: int, t0: int, sem: Semantics) -> Iterator:
    """``mapInArrow`` body: group consecutive rows by key (they arrive sorted) and fold."""
    import pyarrow as pa

    schema = _arrow_schema()
    group: list[dict] = []
    group_key: object = object()
    for batch in batches:
        out: list[dict] = []
        for row in batch.to_pylist():
            key = row["key"]
            if key is None:  # null keys are rejected one by one, never grouped
                out.extend(_fold_group([row], wall_ms, t0, sem))
                continue
            if key != group_key and group:
                out.extend(_fold_group(group, wall_ms, t0, sem))
                group = []
            group_key = key
            group.append(row)
        if out:
            yield pa.RecordBatch.from_pylist(out, schema=schema)
    if group:
        yield pa.RecordBatch.from_pylist(_fold_group(group, wall_ms, t0, sem), schema=schema)
