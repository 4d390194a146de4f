"""``ttl report``'s page for a store with nothing to chart: it says so (pure: the render
of collected figures, no table)."""

from __future__ import annotations

from ttl import report

EMPTY = {"store": "s", "table": "/t", "generated_at": 0, "clock": "wall (now 0)",
         "table_version": 3, "live_entries": 0, "expired_not_swept": 0,
         "expiry": {label: 0 for label, _ in report.EXPIRY_BUCKETS} | {"never": 0},
         "lateness": {"wall": {label: 0 for label, _ in report.LATENESS_BUCKETS},
                      "stream": {label: 0 for label, _ in report.LATENESS_BUCKETS}},
         "commits": [{"version": 1, "what": "batch", "seconds": 0.5, "at": 0},
                     {"version": 2, "what": "SET TBLPROPERTIES", "seconds": None, "at": 0}],
         "changelog_lag_versions": 0, "changelog_lag_seconds": 0.0, "drills": []}


def test_a_store_with_nothing_live_no_sweep_and_no_drill_says_so():
    page = report.render(EMPTY)
    assert "No live entries: nothing expires." in page
    assert 'id="expiry-labels"' not in page  # no empty chart with a negative axis
    assert "No sweep in the last 50 commits evicted an entry." in page
    assert "No restore drill has run yet" in page and 'id="drills"' in page


def test_commits_without_a_recorded_time_are_left_out_not_drawn_at_zero():
    page = report.render(EMPTY)
    assert "(1 without a recorded time left out)" in page
    assert "SET TBLPROPERTIES" not in page.split("ttl-report-data")[0]  # not in the legend
