"""The README's first command (``make run`` = ``ttl run --conf conf/local.toml --demo 50``)
runs the main job on the embedded default and prints a summary."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ttl.config import CONF_DIR

pytestmark = pytest.mark.e2e


def test_embedded_demo_runs_the_stream_and_prints_a_summary_that_adds_up(tmp_path):
    """The shipped embedded profile, with its data under a temporary directory: its own
    broker, sample input, the stream for a few seconds, then the closing summary."""
    profile = (CONF_DIR / "local.toml").read_text()
    profile = profile.replace('path = "data/sessions"', f'path = "{tmp_path / "sessions"}"')
    profile = profile.replace('checkpoint = "data/checkpoints/sessions"',
                              f'checkpoint = "{tmp_path / "checkpoint"}"')
    assert str(tmp_path) in profile  # the test must not touch the checkout's ./data
    conf = tmp_path / "local.toml"
    conf.write_text(profile)
    ttl = Path(sys.executable).parent / "ttl"
    proc = subprocess.run([str(ttl), "run", "--conf", str(conf), "--demo", "20"],
                          capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = re.search(r"summary: (.*)", proc.stdout)
    assert summary, proc.stdout
    fields = {k: int(v) for k, v in re.findall(r"(\w+)=(-?\d+)", summary.group(1))}
    assert fields["batches"] >= 1 and fields["records"] > 0
    assert fields["changelog_records"] > 0
    assert fields["rejected"] > 0  # the sample carries a few invalid records (dead letters)
    assert (tmp_path / "kafka").is_dir()  # the embedded broker kept its data beside the store
    # Operability 3: the tool's own lines, and at most a handful of others (the JVM's
    # "incubator modules" notice; no Spark WARN noise, no client errors after the stop).
    ours = re.compile(r"^\d{4}-\d\d-\d\d [\d:,]+ (INFO|WARNING|ERROR) (ttl|__main__)|^summary: ")
    others = [line for line in (proc.stdout + proc.stderr).splitlines()
              if line.strip() and not ours.match(line)]
    assert len(others) <= 3, others
