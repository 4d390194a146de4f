"""One partition's fold as an executor runs it (pyarrow only): its figures name the keys
expired on arrival while they are few, so the driver needs no job to collect them, and say
whether ``key_hash`` alone tells its keys' stored rows apart."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from ttl.model import Semantics
from ttl.record import InputRecord
from ttl.store.distributed import Figures
from ttl.store.executor_fold import FIGURES, INPUT, STORED, fold_partition
from ttl.store.fold import STORED_COLUMNS, records_table, stored_arrow_schema
from ttl.store.layout import key_hashes

NOW = 1_700_000_000_000
TTL = 60_000


def partition_rows(records: list[InputRecord], stored: dict[bytes, int],
                   hashes: dict[bytes, int] | None = None) -> pa.Table:
    """A partition's tagged rows, as the union of inputs and stored rows gives them, each
    with its ``key_hash`` (``hashes`` overrides a stored key's, as a collision would)."""
    inputs = records_table(records)
    inputs = inputs.append_column("key_hash", key_hashes(inputs["key"]))
    inputs = inputs.append_column("tag", pa.array([INPUT] * inputs.num_rows, pa.int32()))
    for name in ("ts", "expires_at", "record_ttl"):
        inputs = inputs.append_column(name, pa.nulls(inputs.num_rows, pa.int64()))
    rows = pa.table({"key": list(stored), "ts": list(stored.values()),
                     "expires_at": [ts + TTL for ts in stored.values()],
                     "record_ttl": pa.nulls(len(stored), pa.int64())},
                    schema=stored_arrow_schema()).select(list(STORED_COLUMNS))
    rows = rows.append_column("tag", pa.array([STORED] * rows.num_rows, pa.int32()))
    own = dict(zip(rows["key"].to_pylist(), key_hashes(rows["key"]).to_pylist(), strict=True))
    rows = rows.append_column("key_hash", pa.array(
        [{**own, **(hashes or {})}[k] for k in rows["key"].to_pylist()], pa.int64()))
    return pa.concat_tables([inputs, rows], promote_options="default")


def folded(records, stored, inline: int = 0, hashes=None) -> pa.Table:
    return pa.Table.from_batches(list(fold_partition(
        partition_rows(records, stored, hashes).to_batches(), wall_ms=NOW, t0=NOW,
        sem=Semantics(ttl=TTL), inline=inline)))


def figures(records, stored, inline: int = 0, hashes=None) -> dict:
    out = folded(records, stored, inline, hashes)
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
            "next_offsets": {}, "by_hash": True}
    total.add({**base, "expired": 1, "expired_keys": ["61"]})
    total.add({**base, "expired": 0, "expired_keys": []})
    assert total.expired_keys == ["61"]
    total.add({**base, "expired": 5, "expired_keys": None})
    assert total.expired_keys is None


def test_a_stored_row_of_another_key_with_the_same_hash_makes_the_write_match_keys():
    """The join brings every stored row sharing a hash with an input key; a row of another
    key (a collision, planted here by its ``key_hash``) is left by the fold, and the
    partition says the hash alone does not tell the rows apart."""
    records = [InputRecord(b"a", b"new", NOW, (), 0, 1)]
    assert figures(records, {b"a": NOW - 10})["by_hash"] is True
    collided = {b"a": NOW - 10, b"z": NOW - 20}
    hash_a, = key_hashes(pa.array([b"a"])).to_pylist()
    out = folded(records, collided, hashes={b"z": hash_a})
    changes = out.filter(pc.is_in(out["kind"], pa.array(["upsert", "delete"])))
    assert changes["key"].to_pylist() == [b"a"]  # z is not the batch's: untouched
    assert figures(records, collided, hashes={b"z": hash_a})["by_hash"] is False
    # a row of a batch key carrying another key's hash (an operator's UPDATE of key)
    both = [*records, InputRecord(b"z", b"new", NOW, (), 0, 2)]
    assert figures(both, collided)["by_hash"] is True
    assert figures(both, collided, hashes={b"z": hash_a})["by_hash"] is False


def test_two_input_keys_with_one_hash_make_the_write_match_keys():
    records = [InputRecord(b"a", b"1", NOW, (), 0, 1), InputRecord(b"b", b"2", NOW, (), 0, 2)]
    rows = partition_rows(records, {})
    rows = rows.set_column(rows.column_names.index("key_hash"), "key_hash",
                           pa.array([7, 7], pa.int64()))
    out = pa.Table.from_batches(list(fold_partition(
        rows.to_batches(), wall_ms=NOW, t0=NOW, sem=Semantics(ttl=TTL))))
    row, = [json.loads(f) for f in out["figures"].drop_null().to_pylist()]
    assert row["by_hash"] is False


def test_summed_figures_match_by_hash_only_while_every_partition_may():
    total = Figures()
    base = {"counts": {"rejected": {}}, "upserted": 0, "deleted": 0, "stored": 0,
            "rejects": 0, "max_ts": None, "earliest_expiry": None, "first_offsets": {},
            "next_offsets": {}, "expired": 0, "expired_keys": []}
    total.add({**base, "by_hash": True})
    assert total.by_hash is True
    total.add({**base, "by_hash": False})
    total.add({**base, "by_hash": True})
    assert total.by_hash is False


def test_the_positions_named_are_the_changed_keys_rows_with_their_own_hash():
    """With the stored rows' files and row indexes, the fold names the rows the commit
    deletes: a changed key's row with its own hash (an update's old row, a removal's), not
    an unchanged key's, and not a row of another key or of a changed key that carries
    another key's hash (Delta's replace, matching pairs, leaves both)."""
    from ttl.store.executor_fold import POSITION, POSITION_COLUMNS

    records = [InputRecord(b"a", b"new", NOW, (), 0, 1),
               InputRecord(b"b", None, NOW, (), 0, 2),        # removed
               InputRecord(b"c", b"late", NOW - 100, (), 0, 3),  # stored ts is newer
               InputRecord(b"d", None, NOW, (), 0, 4)]        # absent: nothing to remove
    stored = {b"a": NOW - 10, b"b": NOW - 10, b"c": NOW - 10, b"z": NOW - 20, b"y": NOW - 20}
    hash_a, hash_b = key_hashes(pa.array([b"a", b"b"])).to_pylist()
    rows = partition_rows(records, stored, hashes={b"z": hash_a, b"y": hash_b})
    n = rows.num_rows
    rows = rows.append_column(POSITION_COLUMNS[0], pa.array([7] * n, pa.int64()))
    rows = rows.append_column(POSITION_COLUMNS[1], pa.array(range(n), pa.int64()))
    # y is also a changed key now, its row carrying b's hash
    rows = pa.concat_tables([rows.slice(0, len(records)), partition_rows(
        [InputRecord(b"y", b"new", NOW, (), 0, 5)], {}).append_column(
            POSITION_COLUMNS[0], pa.array([7], pa.int64())).append_column(
            POSITION_COLUMNS[1], pa.array([99], pa.int64())).select(rows.column_names),
        rows.slice(len(records))])
    out = pa.Table.from_batches(list(fold_partition(
        rows.to_batches(), wall_ms=NOW, t0=NOW, sem=Semantics(ttl=TTL))))
    named = out.filter(pc.equal(out["kind"], POSITION))
    keys_at = {r: k for k, r, t in zip(rows["key"].to_pylist(),
                                        rows[POSITION_COLUMNS[1]].to_pylist(),
                                        rows["tag"].to_pylist(), strict=True) if t == STORED}
    assert sorted(keys_at[r] for r in named[POSITION_COLUMNS[1]].to_pylist()) == [b"a", b"b",
                                                                                  b"c"]
    row, = [json.loads(f) for f in out["figures"].drop_null().to_pylist()]
    assert row["positions"] == 3


def test_stored_rows_of_no_input_hash_are_dropped_and_a_partition_of_only_those_is_empty():
    """The Bloom filter that finds a batch's stored rows lets some of other keys through:
    the partition keeps only the stored rows of its inputs' hashes, so the fold, its
    figures and the rows the commit deletes are what the exact join would give; a
    partition that got only such rows gives nothing at all."""
    records = [InputRecord(b"a", b"2", NOW, (), 0, 1)]
    exact = folded(records, {b"a": NOW - 10})
    leaky = folded(records, {b"a": NOW - 10, b"x": NOW - 10, b"y": NOW - 20})
    assert leaky.equals(exact)
    assert figures(records, {b"a": NOW - 10, b"x": NOW - 10})["stored"] == 1
    only_stored = partition_rows([], {b"x": NOW - 10}).to_batches()
    assert not list(fold_partition(only_stored, wall_ms=NOW, t0=NOW, sem=Semantics(ttl=TTL)))
