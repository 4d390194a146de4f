"""The stream-time floor's rule (``clock.stream_time_floor``): pure, from table properties."""

from __future__ import annotations

from ttl.clock import stream_time_floor
from ttl.names import PROP_STREAM_TIME_FLOOR, PROP_STREAM_TIME_THROUGH


def test_a_floor_covers_versions_only_with_the_version_it_was_computed_through():
    assert stream_time_floor({}) == (None, None)
    # an older engine's floor (no version): a lower bound that covers no commit
    assert stream_time_floor({PROP_STREAM_TIME_FLOOR: "5"}) == (5, None)
    assert stream_time_floor({PROP_STREAM_TIME_FLOOR: "-7",
                              PROP_STREAM_TIME_THROUGH: "12"}) == (-7, 12)
    # a version without a floor covers nothing either
    assert stream_time_floor({PROP_STREAM_TIME_THROUGH: "12"}) == (None, None)


def test_a_floor_covering_versions_the_table_lacks_covers_none_and_recovery_takes_the_max():
    from ttl.clock import recovered_stream_time

    props = {PROP_STREAM_TIME_FLOOR: "5", PROP_STREAM_TIME_THROUGH: "12"}
    assert stream_time_floor(props, 12) == (5, 12) and stream_time_floor(props) == (5, 12)
    assert stream_time_floor(props, 11) == (5, None)  # copied from another table's log
    assert recovered_stream_time(None, "7", 5, None) == 7
    assert recovered_stream_time(None, None) is None
