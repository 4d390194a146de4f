"""Where a stream may resume its input (pure rules)."""

from __future__ import annotations

from ttl.input_position import describe, gaps_ahead


def test_a_checkpoint_at_the_tables_position_skips_nothing():
    assert gaps_ahead({"0": 5, "1": 7}, {"0": 5, "1": 7}) == {}


def test_a_checkpoint_behind_is_no_gap_here():  # the per-batch replay check's case
    assert gaps_ahead({"0": 3}, {"0": 5}) == {}


def test_a_checkpoint_ahead_names_each_partitions_skipped_offsets():
    gaps = gaps_ahead({"0": 9, "1": 7, "2": 4}, {"0": 5, "1": 7})
    assert gaps == {"0": (5, 9)}  # partition 2: the table records nothing to judge by
    assert describe(gaps) == "partition 0 offsets 5..8"
