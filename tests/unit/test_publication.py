"""``ttl.publication.Publication``: one publication at a time, a batch's in the background,
and a background failure raised to every later caller (pure logic: a stand-in publisher)."""

from __future__ import annotations

import threading

import pytest

from ttl.phases import BatchPhases
from ttl.publication import Publication


class _Publisher:
    """Records the order of publications; the first one blocks until released."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[str] = []
        self.release = threading.Event()
        self.fail = fail
        self.progress = type("P", (), {"version": 12})()
        self.offset = 2

    def publish_known(self, version, changes, until):
        self.release.wait(10)
        if self.fail:
            raise RuntimeError("broker gone")
        self.calls.append(f"known {version}")
        return type("R", (), {"records": 3})()

    def publish(self, until):
        self.calls.append("feed")
        return type("R", (), {"records": 1})()


def _written(version):
    return type("W", (), {"version": version, "changes": object()})()


def test_a_publication_after_the_one_under_way_waits_for_it_so_versions_keep_order():
    publisher, seen, done = _Publisher(), [], []
    publication = Publication(publisher, on_published=lambda r: seen.append(r.records),
                              on_failure=lambda exc: pytest.fail(str(exc)))
    publication.behind(_written(5), 5, BatchPhases(), done.append)
    later = threading.Thread(target=publication.after_current)
    later.start()
    later.join(0.2)
    assert later.is_alive() and publisher.calls == []  # waits for the batch's
    publisher.release.set()
    later.join(10)
    assert publisher.calls == ["known 5", "feed"] and seen == [3, 1] and len(done) == 1
    assert publication.table_version() == 10


def test_a_failed_background_publication_stops_the_stream_and_is_raised_to_every_caller():
    publisher, failures = _Publisher(fail=True), []
    publication = Publication(publisher, on_published=lambda r: None,
                              on_failure=failures.append)
    publisher.release.set()
    publication.behind(_written(5), 5, BatchPhases(), lambda r: pytest.fail("published"))
    for _ in range(2):
        with pytest.raises(RuntimeError, match="broker gone"):
            publication.wait()
    assert len(failures) == 1
    with pytest.raises(RuntimeError):
        publication.after_current()
    assert publisher.calls == []  # nothing published past the failure


def test_a_scheduled_job_does_not_wait_for_a_batchs_publication_under_way():
    """``unless_busy`` (a wall sweep's, under the store's lock): while a batch's
    publication runs it returns at once and publishes nothing (the stream's next batch
    would otherwise wait for the lock that long); once none runs, it publishes."""
    publisher, done = _Publisher(), []
    publication = Publication(publisher, on_published=lambda r: None,
                              on_failure=lambda exc: pytest.fail(str(exc)))
    publication.behind(_written(5), 5, BatchPhases(), done.append)
    assert publication.unless_busy() is None and publisher.calls == []
    publisher.release.set()
    publication.wait()
    assert publication.unless_busy().records == 1
    assert publisher.calls == ["known 5", "feed"]
