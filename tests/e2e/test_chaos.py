"""A fixed-seed sample of the fault-injection harness (``python -m tests.chaos``)."""

from __future__ import annotations

import os

import pytest

from tests import chaos

pytestmark = pytest.mark.e2e


def test_killed_streams_sweeps_and_a_conflict_storm_lose_and_resurrect_nothing(
        spark, kafka, tmp_path):
    """The stream killed -9 at a random moment under an operator's conflicting UPDATEs,
    and a sweep killed -9 and redone, over a random workload whose parts leave input
    partitions empty in turns (seed fixed; ``TTL_CHAOS_RUNS=N`` runs N seeds; broker
    restarts, drills and restores are in ``python -m tests.chaos``): the table equals the
    reference model and the changelog replays to the table."""
    runs = int(os.environ.get("TTL_CHAOS_RUNS", "1"))
    for i in range(runs):
        work = tmp_path / f"run{i}"
        work.mkdir()
        result = chaos.run_one(spark, kafka, work, seed=7 + i, kills=2,
                               faults=("storm", "sweep"))
        assert result.ok and result.kills == 2 and result.records > 1000, result.line()
        assert sorted(result.faults) == ["storm", "sweep"], result.line()


@pytest.mark.long
def test_a_lost_store_and_a_restart_on_an_old_checkpoint_lose_nothing(
        spark, kafka, tmp_path):
    """The store's directory removed under a running stream; the stream killed -9 and its
    directory lost with the checkpoint kept. After each, the harness takes the actions the
    refusals name (``ttl restore``, moving the checkpoint away): the table equals the
    reference model and the changelog replays to it (seed fixed; ``python -m tests.chaos``
    runs every fault, the clock-ahead contender too: in the suite that rule is
    test_eviction's takeover test, with injected clocks).

    Long mode only (``TTL_LONG=1``): the default suite holds each of its refusals and
    actions in ``tests/e2e/test_recovery.py`` and test_stream_job's disaster recovery."""
    result = chaos.run_one(spark, kafka, tmp_path, seed=2, kills=2, records=300,
                           faults=("lost_dir", "restore_restart"))
    assert result.ok and result.kills == 2, result.line()
    assert sorted(result.faults) == ["lost_dir", "restore_restart"], result.line()
    assert "restore" in (result.actions or []), result.line()
