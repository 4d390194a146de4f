"""Which of Delta's commit conflicts ``delta_log.retrying`` runs an operation again after.

delta-spark raises, for a conflict of the JVM, the Python class of the Java exception's
name (``io.delta.exceptions.<Name>``); ``delta_log.conflicts`` matches those classes. (The
integration test ``test_delta_log`` throws each from the JVM.)"""

from __future__ import annotations

import pytest
from delta import exceptions as ex
from pyspark.errors import AnalysisException

from ttl import delta_log

#: Every conflict exception Delta has (``io.delta.exceptions``): each is retried.
DELTA_CONFLICTS = ("ConcurrentAppendException", "ConcurrentDeleteReadException",
                   "ConcurrentDeleteDeleteException", "MetadataChangedException",
                   "ConcurrentTransactionException", "ProtocolChangedException",
                   "ConcurrentWriteException")


def failing(errors: list[BaseException]):
    """An action that raises ``errors`` one per call, then returns how many calls failed."""
    calls = []

    def action() -> int:
        calls.append(None)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return len(errors)

    return action


@pytest.mark.parametrize("name", DELTA_CONFLICTS)
def test_each_delta_conflict_is_retried(name):
    """Issue 31, scenario 8: ConcurrentWriteException was not among them, so a batch that
    met one failed instead of running again; MetadataChangedException must be (a retry
    runs the batch's checks again against the new metadata)."""
    conflict = getattr(ex, name)(f"[DELTA_{name}] a concurrent transaction won")
    assert delta_log.retrying(failing([conflict, conflict]), what="test", backoff_s=0) == (2, 2)


def test_conflicts_are_exactly_deltas_conflict_classes():
    assert sorted(c.__name__ for c in delta_log.conflicts()) == sorted(DELTA_CONFLICTS)


@pytest.mark.parametrize("error", [
    AnalysisException("[DELTA_TABLE_NOT_FOUND] not a Delta table"),
    ValueError("a bug, not a race"),
])
def test_other_errors_are_raised_at_once(error):
    action = failing([error])
    with pytest.raises(type(error)):
        delta_log.retrying(action, what="test", backoff_s=0)
    assert action() == 1  # called once before: no retry


def test_a_conflict_that_keeps_coming_fails_after_the_retries():
    conflict = ex.ConcurrentWriteException("again")
    action = failing([conflict] * 4)
    with pytest.raises(ex.ConcurrentWriteException):
        delta_log.retrying(action, what="test", retries=3, backoff_s=0)
    assert action() == 4  # 1 + 3 retries used every error


@pytest.mark.parametrize(("checked", "read", "named"), [
    (7, 7, None),          # the write read the version the batch checked: Delta checks the rest
    (7, 6, None),          # (not possible, but never a range)
    (7, 9, (8, 9)),        # two commits in between: checked by neither
    (None, 9, None),       # no version checked (a command's write)
    (7, None, None),       # a commit without readVersion
])
def test_the_versions_between_a_batchs_check_and_its_writes_read_are_named(checked, read,
                                                                           named):
    """``write.unchecked_versions``: the commits a batch's fold did not see and Delta did
    not check its commit against (docs/semantics.md, Single writer and the lease)."""
    from ttl.store.write import unchecked_versions

    written = delta_log.Commit(10, 0.0, "WRITE", {}, read_version=read)
    assert unchecked_versions(written, checked) == named
