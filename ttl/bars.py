"""Progress bars for people: Spark actions that run for minutes, and long loops (``ttl.bars``;
not the changelog's progress record, which is ``ttl.changelog.progress``).

A restore of a large changelog is a single bounded read: without this the operator sees
nothing between "reading" and "writing". Spark's status tracker knows how many tasks of
the action's stages have finished; with the input split into many tasks, that fraction of
the known total (the offsets to read) is a fair running count.

``bar`` draws that (and other counts: a catch-up's offsets, an upgrade's steps) as a tqdm
progress bar, only when stderr is a terminal; logs and pipes get the log lines alone.
"""

from __future__ import annotations

import logging
import sys
import threading
import uuid
from collections.abc import Callable
from typing import IO

log = logging.getLogger(__name__)


class SparkProgress:
    """Context manager: tag the Spark jobs started in this thread and report their progress.

    ``report(done_fraction)`` is called every ``every_s`` seconds from a daemon thread, and
    once more (with 1.0) when the block ends without an error.
    """

    def __init__(self, spark, report: Callable[[float], None], every_s: float = 5.0) -> None:
        self.sc = spark.sparkContext
        self.report = report
        self.every_s = every_s
        self.group = f"ttl-progress-{uuid.uuid4()}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="ttl-progress", daemon=True)

    def __enter__(self) -> SparkProgress:
        self.sc.setJobGroup(self.group, "ttl progress", interruptOnCancel=False)
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join(timeout=self.every_s + 5)
        self.sc.setLocalProperty("spark.jobGroup.id", None)
        self.sc.setLocalProperty("spark.job.description", None)
        if exc_type is None:
            self.report(1.0)

    def fraction(self) -> float:
        """Finished tasks over all tasks of the tagged jobs' stages (0 before any starts)."""
        tracker = self.sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self.group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done / total if total else 0.0

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.report(self.fraction())
            except Exception:  # noqa: BLE001 - progress must never fail the job
                log.debug("progress poll failed", exc_info=True)


def bar(total: int, desc: str, unit: str = "records", file: IO[str] | None = None):
    """A tqdm bar on ``file`` (default stderr), drawn only when it is a terminal (a disabled
    bar accepts the same calls and draws nothing)."""
    import shutil

    from tqdm import tqdm

    out = file or sys.stderr
    width = shutil.get_terminal_size((100, 24)).columns or 100
    return tqdm(total=total, desc=desc, unit=unit, file=out, ncols=width,
                disable=not _is_terminal(out), leave=True)


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def move_to(progress_bar, done: float) -> None:
    """Set a bar to ``done`` (counts only go forward)."""
    if done > progress_bar.n:
        progress_bar.update(done - progress_bar.n)
