"""``positional.find_rows`` and ``find_due``: the physical row indexes a replace or a sweep by
position deletes, read from real parquet files of several row groups (pyarrow writes them;
Spark's files here have one)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ttl.errors import PositionalUnsupported
from ttl.store import positional
from ttl.store.lookup import may_hold


def _file(path, hashes: list[int], keys: list[bytes], group_rows: int) -> None:
    pq.write_table(pa.table({"key": pa.array(keys, pa.binary()),
                             "key_hash": pa.array(hashes, pa.int64())}),
                   path, row_group_size=group_rows)


def _actions(rows: list[tuple[str, int | None, int | None, int | None]]) -> pa.Table:
    """delta-rs's flattened add actions: path, row count, ``key_hash`` bounds."""
    names, counts, lows, highs = zip(*rows, strict=True)
    return pa.table({"path": pa.array(names), "num_records": pa.array(counts, pa.int64()),
                     "min.key_hash": pa.array(lows, pa.int64()),
                     "max.key_hash": pa.array(highs, pa.int64())})


def test_rows_are_found_by_their_index_in_the_file_across_row_groups(tmp_path):
    """Rows in the first, a middle and the last of ten row groups are found at their index
    in the whole file; a row of another key sharing a hash only when the keys are not
    given (the hashes tell the keys apart); a file whose statistics exclude every hash is
    not opened (it does not exist here), one without statistics is."""
    hashes = list(range(0, 2000, 2))  # sorted, so row groups hold narrow ranges
    keys = [b"k%04d" % i for i in range(1000)]
    keys[400] = b"other"  # a row of another key with the hash the batch's k0400 has
    _file(tmp_path / "a.parquet", hashes, keys, group_rows=100)
    _file(tmp_path / "b.parquet", [7, 10], [b"x", b"k0005"], group_rows=1)
    files = _actions([("a.parquet", 1000, 0, 1998), ("b.parquet", 2, None, None),
                      ("absent.parquet", 5, 5000, 6000)])
    wanted = np.array([10, 300, 800, 1998], np.int64)  # k0005, k0150, k0400, k0999
    batch = pa.array([b"k0005", b"k0150", b"k0400", b"k0999"], pa.binary())
    found = positional.find_rows(str(tmp_path), files, wanted, batch)
    assert {name: rows.tolist() for name, rows in found.items()} == {
        "a.parquet": [5, 150, 999], "b.parquet": [1]}
    by_hash = positional.find_rows(str(tmp_path), files, wanted, None)
    assert by_hash["a.parquet"].tolist() == [5, 150, 400, 999]
    assert positional.find_rows(str(tmp_path), files, np.array([1], np.int64), None) == {}


def test_a_file_to_touch_without_a_row_count_is_refused(tmp_path):
    """An entry with a deletion vector needs the file's row count: a file written without
    statistics, holding a row to delete, makes the batch take Delta's write instead."""
    _file(tmp_path / "a.parquet", [1, 2, 3], [b"a", b"b", b"c"], group_rows=2)
    files = _actions([("a.parquet", None, None, None)])
    with pytest.raises(PositionalUnsupported, match="a.parquet has no row count"):
        positional.find_rows(str(tmp_path), files, np.array([3], np.int64), None)
    assert positional.find_rows(str(tmp_path), files, np.array([9], np.int64), None) == {}


def test_unsorted_hashes_find_rows_in_narrow_files_and_count_what_they_read(tmp_path):
    """A batch's hashes come in any order; files and row groups of narrow ``key_hash``
    ranges (a table clustered by it) are each read only when one falls in their range, and
    ``rows_to_read`` counts the rows of those files (all of the table's, twice, when one
    without a row count may hold one: past any bound)."""
    for n in range(4):  # four files of 100 rows, hashes n*1000 .. n*1000+99
        _file(tmp_path / f"{n}.parquet", list(range(n * 1000, n * 1000 + 100)),
              [b"k%d" % (n * 1000 + i) for i in range(100)], group_rows=10)
    files = _actions([(f"{n}.parquet", 100, n * 1000, n * 1000 + 99) for n in range(4)])
    wanted = np.array([3005, 7, 1099, 3000], np.int64)
    found = positional.find_rows(str(tmp_path), files, wanted, None)
    assert {k: v.tolist() for k, v in found.items()} == {
        "0.parquet": [7], "1.parquet": [99], "3.parquet": [0, 5]}
    assert positional.rows_to_read(files, may_hold(files, np.sort(wanted))) == 300
    unknown = _actions([("0.parquet", 100, 0, 99), ("x.parquet", None, None, None)])
    assert positional.rows_to_read(unknown, may_hold(unknown, np.array([7], np.int64))) == 200


def _expiring(path, expires: list[int | None], group_rows: int) -> None:
    pq.write_table(pa.table({"expires_at": pa.array(expires, pa.int64())}), path,
                   row_group_size=group_rows)


def test_due_rows_are_found_in_the_files_and_row_groups_whose_statistics_reach_t(tmp_path):
    """A sweep at T deletes the rows with ``expires_at <= T`` (never a null: an entry
    without expiry): in the row groups whose minimum reaches T, at their index in the whole
    file; a file whose statistics start after T, or hold only nulls, is not opened (it
    does not exist here); one without statistics is."""
    _expiring(tmp_path / "a.parquet", [50, 10, None, 30, 90, 20, 70, 40], group_rows=2)
    _expiring(tmp_path / "b.parquet", [5, None], group_rows=2)
    files = pa.table({
        "path": ["a.parquet", "b.parquet", "late.parquet", "nulls.parquet"],
        "num_records": pa.array([8, 2, 3, 4], pa.int64()),
        "min.expires_at": pa.array([10, None, 100, None], pa.int64()),
        "null_count.expires_at": pa.array([1, None, 0, 4], pa.int64())})
    assert positional.may_be_due(files, 40).tolist() == [True, True, False, False]
    found = positional.find_due(str(tmp_path), files, 40)
    # groups [50, 10], [None, 30], [90, 20], [70, 40]: every one reaches 40
    assert {k: v.tolist() for k, v in found.items()} == {
        "a.parquet": [1, 3, 5, 7], "b.parquet": [0]}
    assert {k: v.tolist() for k, v in positional.find_due(str(tmp_path), files, 10).items()} \
        == {"a.parquet": [1], "b.parquet": [0]}
    assert positional.find_due(str(tmp_path), files, 4) == {}
    assert positional.rows_to_read(files, positional.may_be_due(files, 40)) == 10
