"""The stream's publication: one publisher, used by one thread at a time, and a batch's
publication in the background while the next batch runs.

Why a background publication: a batch's publication (Python and Kafka work) overlaps the
next batch's read, lookup, fold and write (Spark work). Why one at a time: versions go out
in commit order through the one transactional publisher, so anything that publishes (the
next batch, a wall sweep, VACUUM, the shutdown) first waits for the publication under way.
A failed background publication ends the run with its own error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from ttl.changelog.publisher import Publisher, PublishResult
from ttl.phases import BatchPhases


def release(written) -> None:
    """Let go of a batch's change rows held on the executors for its publication, if any
    (published, or not to be: the run is ending)."""
    changes = getattr(written, "changes", None)
    if changes is not None and hasattr(changes, "release"):
        changes.release()
        written.changes = None


class Publication:
    """``publisher``'s use by a stream. ``on_published`` sees every result (counts,
    metrics); ``on_failure`` is told of a background publication's error (the stream
    stops) before any later call raises it."""

    def __init__(self, publisher: Publisher, *, on_published: Callable[[PublishResult], None],
                 on_failure: Callable[[BaseException], None]) -> None:
        self.publisher = publisher
        self._on_published = on_published
        self._on_failure = on_failure
        self._thread: threading.Thread | None = None  # a batch's, in the background
        self._error: BaseException | None = None

    def now(self, written=None, until: int | None = None) -> PublishResult:
        """Publish every unpublished version (up to ``until``): a batch's own version from
        the changes it wrote when they are known (no change-feed read), in commit order
        either way. The caller makes sure no other publication runs (``wait``)."""
        try:
            if written is not None and written.changes is not None:
                result = self.publisher.publish_known(written.version, written.changes, until)
            else:
                result = self.publisher.publish(until)
        finally:
            release(written)
        self._on_published(result)
        return result

    def after_current(self, written=None) -> PublishResult:
        """Publish every unpublished version, after the publication under way, if any."""
        self.wait()
        return self.now(written)

    def unless_busy(self) -> PublishResult | None:
        """Publish every unpublished version now, unless a batch's publication is under
        way: then nothing (``None``); the next batch's publication, or the next call,
        publishes what is left. For the scheduled jobs, which call it under the store's
        lock: waiting there for a batch's publication made the stream's next batch wait
        for the lock as long (seconds a batch, measured)."""
        thread = self._thread
        if thread is not None and thread.is_alive():
            return None
        self.wait()  # a finished one's error is raised here, as by any later call
        return self.now()

    def behind(self, written, until: int, phases: BatchPhases,
               done: Callable[[PublishResult], None]) -> None:
        """Publish a batch in the background; ``done`` gets its result. The next caller of
        ``wait`` (or ``after_current``) waits for it."""

        def publish() -> None:
            try:
                with phases.phase("publish"):
                    published = self.now(written, until)
                done(published)
            except BaseException as exc:  # noqa: BLE001 - raised again by ``wait``
                self._error = exc
                self._on_failure(exc)

        self._thread = threading.Thread(target=publish, name="ttl-publication", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Wait for the publication under way, if any; raise its error (every time: the run
        is ending with it, and nothing may publish past it)."""
        # Joined before it is forgotten: a second caller (the run's loop is not under the
        # stream's lock; publishers are) must not see "none under way" while it still runs.
        thread = self._thread
        if thread is not None:
            thread.join()
            if self._thread is thread:
                self._thread = None
        if self._error is not None:
            raise self._error

    @property
    def from_executors(self) -> bool:
        """Whether this stream's versions are published from the executors."""
        return self.publisher.from_executors

    def table_version(self) -> int:
        """The table version the changelog has (this stream's publisher is the only one)."""
        return self.publisher.progress.version - self.publisher.offset
