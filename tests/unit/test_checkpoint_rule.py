"""When the engine writes a Delta checkpoint: the pure rule of ``delta_log.checkpoint_due``."""

from __future__ import annotations

import pytest

from ttl.delta_log import (
    CHECKPOINT_LOG_BYTES,
    CHECKPOINT_MAX_COMMITS,
    CHECKPOINT_MIN_COMMITS,
    checkpoint_due,
)


def never() -> int:
    raise AssertionError("the log's size was asked outside the bounds")


@pytest.mark.parametrize(("commits", "log_bytes", "due"), [
    (CHECKPOINT_MIN_COMMITS - 1, never, False),  # never before the tenth commit
    (CHECKPOINT_MIN_COMMITS, lambda: CHECKPOINT_LOG_BYTES, True),  # large commits: Delta's ten
    (CHECKPOINT_MIN_COMMITS, lambda: CHECKPOINT_LOG_BYTES - 1, False),  # small: wait
    (CHECKPOINT_MAX_COMMITS - 1, lambda: 1400 * (CHECKPOINT_MAX_COMMITS - 1), False),
    (CHECKPOINT_MAX_COMMITS, never, True),  # however small
    (5 * CHECKPOINT_MAX_COMMITS, never, True),
])
def test_a_checkpoint_is_due_after_ten_large_commits_or_many_small_ones(commits, log_bytes,
                                                                       due):
    assert checkpoint_due(commits, log_bytes) is due


def test_the_bounds_keep_their_order():
    assert 0 < CHECKPOINT_MIN_COMMITS < CHECKPOINT_MAX_COMMITS
    assert CHECKPOINT_MAX_COMMITS * 1400 < CHECKPOINT_LOG_BYTES  # a trickle's 1.4 KB commits
