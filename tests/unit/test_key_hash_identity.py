"""When ``key_hash`` alone may stand for the key in a write's match
(``layout.hash_identifies_keys``): pure logic, against its definition on generated keys
whose hashes are drawn from a small range, so that collisions are common."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from ttl.store.layout import hash_identifies_keys, key_hashes

KEYS = st.binary(min_size=1, max_size=2)


@given(hash_of=st.dictionaries(KEYS, st.integers(0, 5), min_size=1, max_size=8),
       data=st.data())
def test_it_holds_exactly_when_no_two_keys_share_a_hash_and_no_stored_row_is_foreign(
        hash_of, data):
    universe = sorted(hash_of)
    batch = data.draw(st.lists(st.sampled_from(universe), min_size=1, max_size=6))
    batch_hashes = {hash_of[k] for k in batch}
    # What a lookup by hash finds: every stored row whose hash is one of the batch's; a
    # row may carry another key's hash (``wrong``: against the table's rule).
    stored = [(k, hash_of[k]) for k in data.draw(st.lists(st.sampled_from(universe),
                                                           unique=True))]
    wrong = data.draw(st.lists(st.tuples(st.sampled_from(universe), st.integers(0, 5)),
                               max_size=2))
    stored = [(k, h) for k, h in stored + wrong if h in batch_hashes]
    expected = (len(set(batch)) == len(batch_hashes)
                and all(k in set(batch) and h == hash_of[k] for k, h in stored))
    got = hash_identifies_keys(pa.array(batch, pa.binary()),
                               pa.array([hash_of[k] for k in batch], pa.int64()),
                               pa.array([k for k, _ in stored], pa.binary()),
                               pa.array([h for _, h in stored], pa.int64()))
    assert got is expected


def test_real_hashes_of_distinct_keys_identify_them():
    keys = pa.array([f"key-{i}".encode() for i in range(10_000)], pa.binary())
    hashes = key_hashes(keys)
    assert hash_identifies_keys(keys, hashes, keys.slice(0, 5000), hashes.slice(0, 5000))
    assert not hash_identifies_keys(keys, hashes, pa.array([b"other"]), hashes.slice(0, 1))
    assert not hash_identifies_keys(keys, hashes, keys.slice(1, 1), hashes.slice(0, 1))
    assert hash_identifies_keys(keys, hashes, pa.array([], pa.binary()),
                                pa.array([], pa.int64()))
