"""The house's layers: no import circle in ``ttl`` and no import from a lower floor to a
higher one (the contracts in ``pyproject.toml``, checked by import-linter, function-level
imports included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ttl.config import REPO_ROOT


def test_imports_keep_the_floors_and_make_no_circle():
    linter = Path(sys.executable).with_name("lint-imports")
    run = subprocess.run([str(linter), "--no-cache"], cwd=REPO_ROOT, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "2 kept, 0 broken" in run.stdout
