"""Restore points and Spark progress: the pure parts of ``--until-offsets``."""

from __future__ import annotations

import pytest

from ttl.changelog.reader import bounded_ends, parse_offsets
from ttl.errors import RestoreError

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


def test_a_drill_warns_when_its_restore_took_a_large_share_of_tombstone_retention():
    from ttl.drill import DrillReport, _retention_warning

    report = DrillReport("s", 3, "cl", 0, restore_seconds=12.0)
    assert _retention_warning({"delete.retention.ms": "100000"}, report)[0].startswith(
        "the restore took 12 s, more than 10% of delete.retention.ms (100 s)")
    assert _retention_warning({"delete.retention.ms": "604800000"}, report) == []
    assert _retention_warning({}, report) == []


def test_a_point_in_time_restore_warns_when_compaction_could_have_removed_its_records():
    """Reliability 6: both ways compaction can make a point-in-time restore inexact, and
    neither when the records after the point are young (or the point is a drill's)."""
    from ttl.restore import compaction_warnings

    now, hour, day = 10**12, 3_600_000, 86_400_000
    settings = {"min.compaction.lag.ms": str(hour), "delete.retention.ms": str(day)}
    assert compaction_warnings(settings, "cl", now - 60_000, now - 120_000, now) == []
    assert compaction_warnings(settings, "cl", None, now - 2 * hour, now) == []
    stale = compaction_warnings(settings, "cl", now - 2 * hour, now - 3 * hour, now)
    assert len(stale) == 1 and "min.compaction.lag.ms (3,600 s)" in stale[0]
    # Nothing after the point survives, but the point is older than the tombstone
    # retention: a tombstone after it may be gone, with what it replaced.
    old = compaction_warnings(settings, "cl", None, now - 2 * day, now)
    assert len(old) == 1 and "delete.retention.ms (86,400 s)" in old[0]
    assert compaction_warnings(settings, "cl", None, now - 2 * day, now,
                               point_is_progress=True) == []
    assert len(compaction_warnings(settings, "cl", now - 2 * day, now - 3 * day, now)) == 2


def test_reading_progress_never_goes_backwards(caplog):
    import re

    from ttl.restore import RestoreResult

    result = RestoreResult("topic", "target", records_total=1000)
    with caplog.at_level("INFO", logger="ttl.restore"):
        for fraction in (0.0, 0.4, 0.36, 0.5, 1.0):  # 0.36: the second stage's tasks came
            result.report_reading(fraction)
    said = [int(m) for m in re.findall(r"~(\d+) of 1000 records", caplog.text)]
    assert said == [0, 400, 400, 500, 1000]
