"""Which files a small batch's lookup reads: ``lookup.files_to_read`` on file statistics."""

from __future__ import annotations

import pyarrow as pa

from ttl.store.layout import key_hashes
from ttl.store.lookup import PRUNE_KEYS, files_to_read, key_hash_predicate, read_share


def _files(ranges):
    return pa.table({"min.key_hash": pa.array([r and r[0] for r in ranges], pa.int64()),
                     "max.key_hash": pa.array([r and r[1] for r in ranges], pa.int64())})


def test_a_file_is_read_when_its_range_holds_a_key_or_it_has_no_statistics():
    keys = pa.array([b"a", b"b"], pa.binary())
    ha, hb = sorted(key_hashes(keys).to_pylist())
    narrow = [(ha, ha), (hb - 1, hb + 1), (hb + 10, hb + 20), (ha - 20, ha - 10)]
    assert files_to_read(_files(narrow), keys) == 2
    assert files_to_read(_files([*narrow, None]), keys) == 3        # no statistics: read
    wide = [(-2**63, 2**63 - 1)] * 4
    assert files_to_read(_files(wide), keys) == 4


def test_the_share_read_is_by_bytes_so_small_wide_files_do_not_hide_the_skipped_large_ones():
    keys = pa.array([b"a"], pa.binary())
    (ha,) = key_hashes(keys).to_pylist()
    clustered = [(ha - 5, ha + 5), (ha + 10, ha + 20), (ha + 30, ha + 40), (ha - 40, ha - 30)]
    wide = [(-2**63, 2**63 - 1)] * 6  # a stream's files since the last OPTIMIZE
    files = _files(clustered + wide).append_column(
        "size_bytes", pa.array([100_000] * 4 + [1_000] * 6, pa.int64()))
    assert files_to_read(files, keys) == 7                       # 7 of 10 files...
    assert read_share(files, keys) == (100_000 + 6_000) / 406_000  # ...but a quarter of bytes
    assert read_share(_files(clustered), keys) == 0.25           # no sizes: by files


def test_the_predicate_names_each_hash_once_and_only_for_small_batches():
    keys = pa.array([b"a", b"a", b"b"], pa.binary())
    predicate = key_hash_predicate(keys)
    assert predicate.startswith("key_hash IN (") and predicate.count(",") == 1
    many = pa.array([b"%d" % i for i in range(PRUNE_KEYS + 1)], pa.binary())
    assert key_hash_predicate(many) is None
