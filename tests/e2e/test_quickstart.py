"""The README's first command runs the main job on the embedded default and prints a summary."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e


def test_demo_command_prints_its_summary(tmp_path):
    ttl = Path(sys.executable).parent / "ttl"
    proc = subprocess.run(
        [str(ttl), "demo", "--data-dir", str(tmp_path), "-n", "14"],
        capture_output=True, text=True, timeout=300, env={**os.environ},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # 14 records over 7 keys; records 6 and 13 are tombstones of keys 6 and 6 -> 6 rows left.
    assert "records_read=14, tombstones_read=2, table_rows=6" in proc.stdout
