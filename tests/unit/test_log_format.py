"""``ttl --log-format json``: one JSON object per log line (operability: issue 15, item 3)."""

from __future__ import annotations

import json
import logging


def test_json_log_lines_carry_time_level_logger_message_and_the_traceback():
    from ttl.cli import _JsonLines

    formatter = _JsonLines()
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("ttl.stream", logging.ERROR, __file__, 1,
                                   "batch %s failed", (7,), sys.exc_info())
    doc = json.loads(formatter.format(record))
    assert doc["level"] == "ERROR" and doc["logger"] == "ttl.stream"
    assert doc["message"] == "batch 7 failed" and doc["ts"].endswith("Z")
    assert "ValueError: boom" in doc["exception"]
    assert "\n" not in formatter.format(record)  # one line, whatever the message holds
