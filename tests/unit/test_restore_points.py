"""Restore points and Spark progress: the pure parts of ``--until-offsets``."""

from __future__ import annotations

import pytest

from ttl.restore import RestoreError, bounded_ends, parse_offsets

MARKS = {0: (0, 100), 1: (5, 40)}


def test_without_a_point_the_read_stops_at_the_captured_ends():
    assert bounded_ends(MARKS, None) == {0: 100, 1: 40}


def test_offsets_within_the_topic_are_the_ends():
    assert bounded_ends(MARKS, {0: 10, 1: 40}) == {0: 10, 1: 40}


@pytest.mark.parametrize(("asked", "match"), [
    ({0: 10}, r"missing \[1\]"),
    ({0: 10, 1: 5, 2: 1}, r"unknown \[2\]"),
    ({0: 101, 1: 5}, r"outside the changelog.*0: \(101, 100\)"),
    ({0: -1, 1: 5}, r"outside the changelog"),
])
def test_bad_points_name_the_partition(asked, match):
    with pytest.raises(RestoreError, match=match):
        bounded_ends(MARKS, asked)


def test_offsets_parse_from_the_command_line():
    assert parse_offsets("0:120, 1:98") == {0: 120, 1: 98}
    with pytest.raises(RestoreError, match="partition:offset"):
        parse_offsets("0=120")
