"""One partition's fold as an executor runs it (pyarrow only): its figures name the keys
expired on arrival while they are few, so the driver needs no job to collect them."""

from __future__ import annotations

import json

import pyarrow as pa

from ttl.model import Semantics
from ttl.record import InputRecord
from ttl.store.distributed import Figures
from ttl.store.executor_fold import FIGURES, INPUT, STORED, fold_partition
from ttl.store.fold import STORED_COLUMNS, records_table, stored_arrow_schema

NOW = 1_700_000_000_000
TTL = 60_000


def partition_rows(records: list[InputRecord], stored: dict[bytes, int]) -> pa.Table:
    """A partition's tagged rows, as the union of inputs and stored rows gives them."""
    inputs = records_table(records)
    inputs = inputs.append_column("tag", pa.array([INPUT] * inputs.num_rows, pa.int32()))
    for name in ("ts", "expires_at", "record_ttl"):
        inputs = inputs.append_column(name, pa.nulls(inputs.num_rows, pa.int64()))
    rows = pa.table({"key": list(stored), "ts": list(stored.values()),
                     "expires_at": [ts + TTL for ts in stored.values()],
                     "record_ttl": pa.nulls(len(stored), pa.int64())},
                    schema=stored_arrow_schema()).select(list(STORED_COLUMNS))
    rows = rows.append_column("tag", pa.array([STORED] * rows.num_rows, pa.int32()))
    return pa.concat_tables([inputs, rows], promote_options="default")


def figures(records, stored, inline: int) -> dict:
    out = pa.Table.from_batches(list(fold_partition(
        partition_rows(records, stored).to_batches(), wall_ms=NOW, t0=NOW,
        sem=Semantics(ttl=TTL), inline=inline)))
    row, = [json.loads(f) for k, f in zip(out["kind"].to_pylist(), out["figures"].to_pylist(),
                                          strict=True) if k == FIGURES]
    return row


def test_the_figures_name_the_keys_expired_on_arrival_up_to_the_limit():
    old = (("ttl.ttl", b"5"),)
    records = [InputRecord(b"a", b"x", NOW - TTL, old, 0, 1),
               InputRecord(b"b", b"x", NOW - TTL, old, 0, 2),
               InputRecord(b"c", b"new", NOW, (), 0, 3)]
    stored = {b"a": NOW - 10, b"b": NOW - 10}
    named = figures(records, stored, inline=2)
    assert named["expired"] == 2 and sorted(named["expired_keys"]) == ["61", "62"]
    assert figures(records, stored, inline=1)["expired_keys"] is None


def test_summed_figures_name_them_only_while_every_partition_did():
    total = Figures()
    base = {"counts": {"rejected": {}}, "upserted": 0, "deleted": 0, "stored": 0,
            "rejects": 0, "max_ts": None, "earliest_expiry": None, "first_offsets": {},
            "next_offsets": {}}
    total.add({**base, "expired": 1, "expired_keys": ["61"]})
    total.add({**base, "expired": 0, "expired_keys": []})
    assert total.expired_keys == ["61"]
    total.add({**base, "expired": 5, "expired_keys": None})
    assert total.expired_keys is None
