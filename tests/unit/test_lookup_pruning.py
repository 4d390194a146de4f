"""Which files a small batch's lookup reads: ``lookup.files_to_read`` on file statistics."""

from __future__ import annotations

import pyarrow as pa

from ttl.store.layout import key_hashes
from ttl.store.lookup import PRUNE_KEYS, files_to_read, key_hash_predicate


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


def test_the_predicate_names_each_hash_once_and_only_for_small_batches():
    keys = pa.array([b"a", b"a", b"b"], pa.binary())
    predicate = key_hash_predicate(keys)
    assert predicate.startswith("key_hash IN (") and predicate.count(",") == 1
    many = pa.array([b"%d" % i for i in range(PRUNE_KEYS + 1)], pa.binary())
    assert key_hash_predicate(many) is None
