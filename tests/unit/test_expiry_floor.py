"""The driver's lower bound on the earliest expiry: trusted only at the version it knows."""

from __future__ import annotations

import pyarrow as pa

from ttl.expiry_floor import NEVER, ExpiryFloor
from ttl.input_position import next_offsets


def test_unknown_until_set_and_only_at_its_version():
    floor = ExpiryFloor()
    assert floor.known_at(0) is None
    floor.set(3, 100)
    assert floor.known_at(3) == 100 and floor.known_at(4) is None
    floor.set(5, None)
    assert floor.known_at(5) == NEVER


def test_own_writes_lower_it_and_sweeps_raise_it():
    floor = ExpiryFloor()
    floor.set(1, 500)
    floor.after_write(1, 2, 300)  # the batch wrote an entry expiring at 300
    assert floor.known_at(2) == 300
    floor.after_write(2, 3, None)  # removals only: the minimum cannot drop
    assert floor.known_at(3) == 300
    floor.after_sweep(3, 4, 400, own=4)  # nothing at or before 400 is left
    assert floor.known_at(4) == 401
    floor.after_sweep(4, 4, 350, own=None)  # a sweep that deleted nothing made no commit
    assert floor.known_at(4) == 401
    floor.after_metadata(4, 5)  # a table property (the stream-time floor): no row changed
    assert floor.known_at(5) == 401
    floor.after_metadata(5, 7)  # and someone else committed too
    assert floor.known_at(7) is None


def test_any_version_it_did_not_make_forgets_it():
    floor = ExpiryFloor()
    floor.set(1, 500)
    floor.after_write(2, 3, 600)  # someone committed version 2: the bound is stale
    assert floor.known_at(3) is None
    floor.set(3, 500)
    floor.after_write(3, 5, 600)  # our write was not the only commit
    assert floor.known_at(5) is None
    floor.set(5, 500)
    floor.after_sweep(5, 7, 900, own=7)
    assert floor.known_at(7) is None
    floor.set(7, 500)
    floor.after_sweep(7, 8, 900, own=None)  # it deleted nothing; someone else committed
    assert floor.known_at(8) is None


def test_a_table_recreated_at_the_same_path_is_another_table():
    floor = ExpiryFloor()
    floor.set(3, 100, table_id="old")
    assert floor.known_at(3, "old") == 100
    assert floor.known_at(3, "new") is None


def test_next_offsets_per_partition_from_one_arrow_read():
    table = pa.table({"partition": pa.array([0, 1, 0, 1], pa.int32()),
                      "offset": pa.array([7, 3, 9, 4], pa.int64())})
    assert next_offsets(table) == {"0": 10, "1": 5}
    assert next_offsets(table.slice(0, 0)) == {}
