"""One partition's fold, on an executor (``ttl.store.distributed``).

Apart from the driver's side of that path because executors import it: this module and
what it imports at its top need the standard library only (pyarrow, numpy and pandas,
which PySpark's Arrow functions need anyway, are imported where they are used), so an
executor's Python needs nothing of the driver's (configuration, Kafka and Delta clients).
"""

from __future__ import annotations

import json

from ttl.input_position import first_offsets, next_offsets
from ttl.model import Semantics
from ttl.store.fold import INPUT_COLUMNS, STORED_COLUMNS, fold_table, input_arrow_schema
from ttl.store.layout import hash_identifies_keys, headers_arrow_type

INPUT, STORED = 0, 1  # the tag of a row that goes into a partition's fold
REJECT, FIGURES = "reject", "figures"  # the ``kind`` of an output row that is no change
#: The ``kind`` of an output row that names a stored row the batch replaces or removes:
#: its file (``stored_file``: Spark's ``xxhash64`` of the file's name) and its physical
#: row index there (``stored_row``), when the stored rows came with them (``POSITION_COLUMNS``).
POSITION = "position"
POSITION_COLUMNS = ("stored_file", "stored_row")

#: One schema for everything a partition's fold gives back (``kind`` says which columns a
#: row fills): changes (``upsert``/``delete``: the driver path's change rows), dead
#: letters (``reject``) and the partition's figures (``figures``: JSON). ``written_at``
#: is the batch's wall clock on every row: the rows' ``updated_at`` and ``rejected_at``
#: come from it, not from a literal in the batch's plan, which Spark would compile into
#: new generated code for every batch (its Java source holds a long literal's value).
OUTPUT_DDL = ("kind STRING, key BINARY, value BINARY, ts BIGINT, "
              "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, expires_at BIGINT, "
              "record_ttl BIGINT, removal_op STRING, timestamp BIGINT, "
              "source_partition INT, source_offset BIGINT, reason STRING, detail STRING, "
              "figures STRING, written_at BIGINT, stored_file BIGINT, stored_row BIGINT")


def output_schema():
    """``OUTPUT_DDL`` in Arrow, built on the executor (no Spark session there to parse the
    DDL; a test holds the two equal)."""
    import pyarrow as pa

    return pa.schema([
        ("kind", pa.string()), ("key", pa.binary()), ("value", pa.binary()),
        ("ts", pa.int64()), ("headers", headers_arrow_type()), ("expires_at", pa.int64()),
        ("record_ttl", pa.int64()), ("removal_op", pa.string()), ("timestamp", pa.int64()),
        ("source_partition", pa.int32()), ("source_offset", pa.int64()),
        ("reason", pa.string()), ("detail", pa.string()), ("figures", pa.string()),
        ("written_at", pa.int64()), ("stored_file", pa.int64()), ("stored_row", pa.int64())])


def _padded(table, kind: str | None, schema, written_at: int):
    """``table``'s columns in the output schema, the others null (``kind`` set if given;
    ``written_at`` on every row)."""
    import pyarrow as pa

    n = table.num_rows
    columns = []
    for f in schema:
        if f.name == "kind" and kind is not None:
            columns.append(pa.array([kind] * n, pa.string()))
        elif f.name == "written_at":
            columns.append(pa.repeat(pa.scalar(written_at, pa.int64()), n))
        elif f.name in table.column_names:
            columns.append(table[f.name].cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def fold_partition(batches, *, wall_ms: int, t0: int, sem: Semantics, inline: int = 0):
    """One partition's fold (``mapInArrow``, on an executor): its input records and the
    stored rows of their keys -> change rows, dead letters and one row of figures, which
    names the keys expired on arrival (hex) when there are at most ``inline`` of them
    (the batch's commit metadata lists them up to that many: no job to collect them)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    batches = list(batches)
    if not batches or not any(b.num_rows for b in batches):
        return
    rows = pa.Table.from_batches(batches)
    tagged = rows.filter(pc.equal(rows["tag"], INPUT))
    if not tagged.num_rows:
        return  # only stored rows the batch's key filter let through, of no key here
    inputs = tagged.select(list(INPUT_COLUMNS)).cast(input_arrow_schema())
    keyed = tagged.filter(pc.is_valid(tagged["key"]))
    found = rows.filter(pc.equal(rows["tag"], STORED))
    # Only the stored rows of this partition's input hashes: the filter that found them
    # (a Bloom filter of the batch's hashes) lets some others through.
    found = found.filter(pc.is_in(found["key_hash"],
                                  value_set=keyed["key_hash"].combine_chunks()))
    stored = found.select(list(STORED_COLUMNS))
    # Rows are partitioned by key_hash: every row of a hash is in this partition.
    by_hash = hash_identifies_keys(keyed["key"], keyed["key_hash"], found["key"],
                                   found["key_hash"])
    folded = fold_table(inputs, stored, wall_ms, t0, sem)
    positions = (_positions(found, keyed, folded.changes)
                 if POSITION_COLUMNS[1] in found.column_names else None)
    schema = output_schema()
    figures = {"counts": folded.counts.as_dict(), "max_ts": folded.max_ts,
               "earliest_expiry": folded.earliest_expiry, "upserted": folded.upserted,
               "deleted": folded.deleted, "expired": folded.expired,
               "stored": stored.num_rows, "rejects": folded.rejects.num_rows,
               "first_offsets": first_offsets(inputs), "next_offsets": next_offsets(inputs),
               "expired_keys": _expired_keys(folded.changes, inline), "by_hash": by_hash,
               "positions": None if positions is None else positions.num_rows}
    parts = [folded.changes] + ([] if positions is None else [positions])
    for part in (*(_padded(p, None, schema, wall_ms) for p in parts),
                 _padded(folded.rejects, REJECT, schema, wall_ms),
                 _padded(pa.table({"figures": [json.dumps(figures)]}), FIGURES, schema,
                         wall_ms)):
        yield from part.to_batches()


def _positions(found, keyed, changes):
    """The stored rows (``found``, with their ``POSITION_COLUMNS``) the batch's commit
    deletes, as ``position`` rows: those of a changed key (an upsert's old row, a delete's
    or expiry's row) whose ``key_hash`` is that key's own (``keyed``: the input rows, which
    carry their key's hash; a changed key's stored rows with its own hash meet its records
    in this partition). Exactly the rows Delta's replace, matching ``(key_hash, key)``
    pairs, deletes; a row written beside the engine with another key's hash stays, as it
    does there, wherever the partitions fall."""
    import pyarrow as pa
    import pyarrow.compute as pc

    keys = changes["key"].combine_chunks()
    mine = keyed.filter(pc.is_in(keyed["key"], value_set=keys))
    at = pc.index_in(found["key"], value_set=mine["key"].combine_chunks())  # null: unchanged
    own = pc.take(mine["key_hash"], at)
    chosen = found.filter(pc.fill_null(pc.equal(own, found["key_hash"]), False))
    return pa.table({"kind": pa.array([POSITION] * chosen.num_rows, pa.string()),
                     **{c: chosen[c] for c in POSITION_COLUMNS}})


def _expired_keys(changes, inline: int) -> list[str] | None:
    """The keys (hex) of ``changes``' expiries, or ``None`` when there are more than
    ``inline``."""
    import pyarrow.compute as pc

    expired = changes.filter(pc.equal(changes["removal_op"], "expire"))
    if expired.num_rows > inline:
        return None
    return [bytes(k).hex() for k in expired["key"].to_pylist()]
