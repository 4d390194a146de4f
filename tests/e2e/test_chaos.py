"""A fixed-seed sample of the fault-injection harness (``python -m tests.chaos``)."""

from __future__ import annotations

import os

import pytest

from tests import chaos

pytestmark = pytest.mark.e2e


def test_killed_streams_lose_and_resurrect_nothing(spark, kafka, tmp_path):
    """The stream is killed -9 twice at random moments of a random workload (seed fixed;
    ``TTL_CHAOS_RUNS=N`` runs N seeds); the table equals the reference model and the
    changelog replays to the table."""
    runs = int(os.environ.get("TTL_CHAOS_RUNS", "1"))
    for i in range(runs):
        work = tmp_path / f"run{i}"
        work.mkdir()
        result = chaos.run_one(spark, kafka, work, seed=7 + i)
        assert result.ok and result.kills == 2 and result.records > 1000, result.line()
