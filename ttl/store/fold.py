"""The batch fold, on the driver: Arrow input records -> ``ttl.model.fold_batch`` -> Arrow.

Why on the driver: a micro-batch is bounded (``stream.max_offsets_per_trigger``) and the
stream already holds it as one Arrow table (its one read of the Kafka input); the stored
rows of its keys come from one narrow lookup. Folding here runs the reference model itself
(no second implementation to drift), with no shuffle, no Python workers and no
materialized intermediate. Measured on 2 cores (README, Performance): a 100k-record batch's
lookup and fold took 6.1 s as a Spark plan (semi-join, shuffle, ``mapInArrow``, local
checkpoint, summary job) and take 1.9 s (lookup) + 2.1 s (the model, ~20 us a record) here.

Outputs, all Arrow: ``changes`` (one row per key whose table row must change: ``upsert``
with the final entry, or ``delete`` with ``removal_op`` delete/expire; exactly what the
commit's change feed will hold) and ``rejects`` (dead letters).
"""

from __future__ import annotations

from dataclasses import dataclass

from ttl.model import BatchResult, Semantics, fold_batch
from ttl.record import Entry, Headers, InputRecord
from ttl.store.layout import headers_arrow_type

INPUT_COLUMNS = ("key", "value", "timestamp", "headers", "partition", "offset")


@dataclass
class Folded:
    """A batch after the fold: the model's result and the rows to write."""

    result: BatchResult
    changes: object  # pa.Table in ``_changes_schema()``
    rejects: object  # pa.Table in ``_rejects_schema()`` (the dead-letter columns)
    upserted: int = 0
    deleted: int = 0
    expired: int = 0
    earliest_expiry: int | None = None

    @property
    def expired_keys(self) -> list[str]:
        """Hex keys removed as expired on arrival (the changelog tags them ``expire``)."""
        return [o.key.hex() for o in self.result.outcomes
                if o.changed and o.final is None and o.had_row and o.removal_op == "expire"]


def _headers(raw) -> Headers:
    return tuple((h["key"], h["value"]) for h in raw) if raw else ()


def _arrow_headers(headers: Headers) -> list[dict]:
    return [{"key": k, "value": v} for k, v in headers]


def input_records(table) -> list[InputRecord]:
    """Arrow rows in ``input_arrow_schema()`` -> the model's records (source order kept)."""
    return [InputRecord(r["key"], r["value"], r["timestamp"], _headers(r["headers"]),
                        r["partition"], r["offset"])
            for batch in table.select(list(INPUT_COLUMNS)).to_batches()
            for r in batch.to_pylist()]


def records_table(records: list[InputRecord]):
    """The model's records -> Arrow in ``input_arrow_schema()`` (the point API's batches)."""
    import pyarrow as pa

    return pa.Table.from_pylist(
        [{"key": r.key, "value": r.value, "timestamp": r.timestamp,
          "headers": _arrow_headers(r.headers), "partition": r.partition, "offset": r.offset}
         for r in records], schema=input_arrow_schema())


def input_arrow_schema():
    """The input records' schema, stated once in Arrow: Spark takes the changes and dead
    letters built from it as they are (``createDataFrame`` of an Arrow table)."""
    import pyarrow as pa

    return pa.schema([("key", pa.binary()), ("value", pa.binary()),
                      ("timestamp", pa.int64()), ("headers", headers_arrow_type()),
                      ("partition", pa.int32()), ("offset", pa.int64())])


def _changes_schema():
    import pyarrow as pa

    return pa.schema([("kind", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
                      ("ts", pa.int64()), ("headers", headers_arrow_type()),
                      ("expires_at", pa.int64()), ("record_ttl", pa.int64()),
                      ("removal_op", pa.string())])


def _rejects_schema():
    import pyarrow as pa

    return pa.schema([("key", pa.binary()), ("value", pa.binary()),
                      ("timestamp", pa.int64()), ("headers", headers_arrow_type()),
                      ("source_partition", pa.int32()), ("source_offset", pa.int64()),
                      ("reason", pa.string()), ("detail", pa.string())])


def fold(records: list[InputRecord], stored: dict[bytes, Entry], wall_ms: int, t0: int,
         sem: Semantics) -> Folded:
    """Fold a batch onto the stored rows of its keys (``stored``; value and headers of a
    stored row are never needed: a key that changes takes the record's)."""
    import pyarrow as pa

    result = fold_batch(records, stored, wall_ms, t0, sem)
    rows: list[dict] = []
    folded = Folded(result, None, None)
    for out in result.outcomes:
        if not out.changed:
            continue
        if out.final is not None:
            e = out.final
            rows.append({"kind": "upsert", "key": out.key, "value": e.value, "ts": e.ts,
                         "headers": _arrow_headers(e.headers), "expires_at": e.expires_at,
                         "record_ttl": e.record_ttl, "removal_op": None})
            folded.upserted += 1
            if e.expires_at is not None and (folded.earliest_expiry is None
                                             or e.expires_at < folded.earliest_expiry):
                folded.earliest_expiry = e.expires_at
        elif out.had_row:
            rows.append({"kind": "delete", "key": out.key, "value": None, "ts": None,
                         "headers": None, "expires_at": None, "record_ttl": None,
                         "removal_op": out.removal_op})
            if out.removal_op == "expire":
                folded.expired += 1
            else:
                folded.deleted += 1
    folded.changes = pa.Table.from_pylist(rows, schema=_changes_schema())
    folded.rejects = pa.Table.from_pylist(
        [{"key": j.record.key, "value": j.record.value, "timestamp": j.record.timestamp,
          "headers": _arrow_headers(j.record.headers), "source_partition": j.record.partition,
          "source_offset": j.record.offset, "reason": j.reason, "detail": j.detail}
         for j in result.rejections], schema=_rejects_schema())
    return folded
