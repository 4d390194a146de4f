"""Where a stream may resume its input (pure rules)."""

from __future__ import annotations

from ttl import input_position
from ttl.input_position import describe, gaps_ahead


def test_a_checkpoint_at_the_tables_position_skips_nothing():
    assert gaps_ahead({"0": 5, "1": 7}, {"0": 5, "1": 7}) == {}


def test_a_checkpoint_behind_is_no_gap_here():  # the per-batch replay check's case
    assert gaps_ahead({"0": 3}, {"0": 5}) == {}


def test_a_checkpoint_ahead_names_each_partitions_skipped_offsets():
    gaps = gaps_ahead({"0": 9, "1": 7, "2": 4}, {"0": 5, "1": 7})
    assert gaps == {"0": (5, 9)}  # partition 2: the table records nothing to judge by
    assert describe(gaps) == "partition 0 offsets 5..8"


def test_input_gone_from_the_topic_is_named_per_partition():
    from ttl.input_position import lost, resume_at

    resume = resume_at({"0": 5, "1": 9}, {"1": 12})
    assert resume == {"0": 5, "1": 12}  # the checkpoint wins where it names a partition
    assert resume_at({"0": 5}, None) == {"0": 5}
    assert lost(resume, {"0": 8, "1": 10, "2": 3}) == {"0": (5, 8)}  # 2: never read


def _batch(i, *, offsets=None, op="batch", whole=False, query="q", batch=None):
    meta = {"op": op, "input_offsets": offsets or {}}
    if whole:
        meta["whole_position"] = True
    if batch is not None:
        meta.update(query_id=query, batch_id=batch)
    return meta


def test_the_recorded_position_is_the_newest_per_partition_back_to_a_whole_one():
    from ttl.input_position import recorded

    newest_first = [_batch(0, offsets={"0": 9}, batch=4), _batch(1, offsets={"1": 7}),
                    _batch(2, offsets={"0": 5, "1": 3, "2": 2}, whole=True),
                    _batch(3, offsets={"3": 1})]  # beyond the whole position: not read
    found = recorded(iter(newest_first), lambda: 1 / 0)
    assert found.position == {"0": 9, "1": 7, "2": 2}
    assert found.last_batch == ("q", 4) and not found.unknown


def test_a_restore_without_a_position_or_a_new_table_holds_input_unknown():
    from ttl.input_position import recorded

    assert recorded([{"op": "restore"}], lambda: 1 / 0).unknown
    restored = recorded([{"op": "restore", "input_offsets": {"0": 4}}, _batch(1, offsets={"0": 1})],
                        lambda: 1 / 0)
    assert restored.position == {"0": 4} and not restored.unknown
    assert recorded([], lambda: True).unknown  # a log from version 0 that recorded nothing
    assert not recorded([], lambda: False).unknown  # old batch commits aged out of the log


def test_the_floor_stands_for_the_commits_it_covers():
    from ttl.input_position import Recorded, from_property, recorded, to_property

    floor, through = from_property(to_property(Recorded({"0": 5, "1": 3}, ("q", 7), False), 12))
    assert (floor, through) == (Recorded({"0": 5, "1": 3}, ("q", 7), False), 12)
    # no commit after the floor's version: the floor is all, its last batch included (a
    # replay of that batch after a crash passes)
    assert recorded([], lambda: 1 / 0, floor) == floor
    # commits after it come first, and the floor fills the partitions they do not name
    found = recorded([_batch(0, offsets={"0": 9}, batch=8)], lambda: 1 / 0, floor)
    assert found == Recorded({"0": 9, "1": 3}, ("q", 8), False)
    # a whole position after the floor ends the read before it
    whole = recorded([_batch(0, offsets={"0": 9}, whole=True, batch=8)], lambda: 1 / 0, floor)
    assert whole.position == {"0": 9}
    # a restore without a position after it: unknown, whatever the floor says
    assert recorded([{"op": "restore"}], lambda: 1 / 0, floor).unknown
    unknown = from_property(to_property(Recorded({}, None, True), 3))[0]
    assert recorded([], lambda: 1 / 0, unknown).unknown
    for unreadable in (None, "", "{", "[1]", '{"position": {"0": "x"}, "through": 1}',
                       '{"position": {"0": 1}}'):  # the last: no version
        assert from_property(unreadable) is None


def test_a_batch_behind_the_table_is_refused_unless_it_replays_the_recording_batch():
    from ttl.input_position import regressed

    position = {"0": 10, "1": 5}
    assert regressed({"0": 10}, {"0": 12}, position, ("q", 3), "q", 4) == {}  # moving on
    assert regressed({"0": 8}, {"0": 10}, position, ("q", 3), "q", 3) == {}  # the replay
    assert regressed({"0": 8}, {"0": 11}, position, ("q", 3), "q", 3) == {"0": (8, 10)}
    assert regressed({"0": 8}, {"0": 10}, position, ("q", 3), "other", 3) == {"0": (8, 10)}
    assert regressed({"1": 1}, {"1": 2}, position, None, "q", 0) == {"1": (1, 5)}


def test_a_new_checkpoint_starts_after_the_recorded_position_or_at_the_earliest():
    from ttl.input_position import starting

    assert starting({"0": 7}, [0, 1]) == {"0": 7, "1": -2}


def test_what_waits_past_the_position_counts_each_partition_from_where_it_resumes():
    """``stream.batch_path = "auto"`` sizes the next batch by it: a partition resumes at the
    table's position, one never read at its first offset, and one whose records before
    the position were deleted by retention from its first offset."""
    marks = {0: (0, 100), 1: (50, 80), 2: (10, 30)}
    assert input_position.waiting({"0": 90, "2": 5}, marks) == 10 + 30 + 20
    assert input_position.waiting({"0": 100, "1": 80, "2": 30}, marks) == 0
    assert input_position.waiting({}, {}) == 0
