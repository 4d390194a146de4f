"""``ttl status --json`` for machines: snake-case keys, numbers or null, reasons apart."""

from __future__ import annotations

import json

from ttl import status


def test_figures_are_numbers_or_null_and_a_null_says_why():
    out = {"store": "s", "table": "/t", "table version": 7, "clock": "wall (now 5)",
           "live entries": "unknown (many deletion-vector files)",
           "expired, not yet swept": "unknown (many deletion-vector files)",
           "stream time": None, "last sweep": None, "dead letters": 0, "lease": "x until 9",
           "changelog lag (versions)": "unknown (embedded broker not running)",
           "changelog lag (seconds)": "unknown (version 5 is gone from the log)",
           status._RAW: {"clock": "wall", "now_ms": 5, "lease": ("x", 9)}}
    doc = json.loads(status.to_json(out))
    assert doc["table_version"] == 7 and doc["clock"] == "wall" and doc["now_ms"] == 5
    assert doc["live_entries"] is None and doc["changelog_lag_versions"] is None
    assert doc["unknown"] == {"live_entries": "many deletion-vector files",
                              "expired_not_swept": "many deletion-vector files",
                              "changelog_lag_versions": "embedded broker not running",
                              "changelog_lag_seconds": "version 5 is gone from the log"}
    assert doc["lease"] == {"holder": "x", "until_ms": 9} and doc["dead_letters"] == 0
    assert all(" " not in key for key in doc)
    assert status._RAW not in "\n".join(status.human(out))


def test_human_lines_show_stream_time_in_utc_beside_the_epoch_ms():
    lines = status.human({"stream time": 1_700_000_000_000,
                          "last sweep": {"version": 4, "clock": "wall", "t": 0, "evicted": 2,
                                         "at": "2026-11-26 09:00:00"}})
    assert lines[0].endswith("stream time: 1700000000000 (2023-11-14T22:13:20.000Z)")
    assert "T=0 (1970-01-01T00:00:00.000Z)" in lines[1]
