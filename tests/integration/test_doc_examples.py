"""The Python examples of the README and docs/other-engines.md run as written, and print
what their comments say."""

from __future__ import annotations

import contextlib
import io
import re

import pytest

from ttl.clock import FixedClock
from ttl.config import REPO_ROOT, StoreConfig
from ttl.record import InputRecord
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration


def _python_block(page: str) -> str:
    (block,) = re.findall(r"```python\n(.*?)```", (REPO_ROOT / page).read_text(), flags=re.S)
    return block


def _run(code: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<doc example>", "exec"), {"__name__": "__doc_example__"})
    return out.getvalue().splitlines()


def test_the_readmes_python_example_runs_and_prints_what_it_says(spark, tmp_path,
                                                                   monkeypatch):
    monkeypatch.chdir(tmp_path)  # the example writes data/carts under the current directory
    lines = _run(_python_block("README.md"))
    assert lines[0] == "b'3 items' None"
    assert lines[1].startswith("ValueTimestampHeaders(value=b'3 items'")
    assert lines[2] == "0"
    assert (tmp_path / "data" / "carts" / "_delta_log").is_dir()


def test_the_delta_rs_example_for_other_engines_reads_the_live_entries(spark, tmp_path,
                                                                       monkeypatch):
    import time

    monkeypatch.chdir(tmp_path)
    now = int(time.time() * 1000)
    two_hours_ago = now - 7_200_000  # "gone" was live when written, and expired since
    store = DeltaStore(spark, StoreConfig(name="sessions", path="data/sessions",
                                          ttl=3_600_000), wall_clock=FixedClock(two_hours_ago))
    store.apply_records([InputRecord(b"live", b"1", now, (), 0, 0),
                         InputRecord(b"gone", b"2", two_hours_ago, (), 0, 1)])
    assert set(store.entries(at=two_hours_ago)) == {b"live", b"gone"}
    lines = _run(_python_block("docs/other-engines.md"))
    count, rows = lines[0].split(" ", 1)
    assert count == "1" and "b'live'" in rows and "b'gone'" not in rows
