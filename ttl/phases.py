"""Where a micro-batch's time goes: seconds per phase and the Spark jobs it ran.

Every batch is timed the same way (read, lookup, fold, write, publish, sweep, ...), and its
Spark jobs are tagged with a job group of their own, so the batch log line can say how many
jobs the batch needed: the first thing to look at when a batch is slow, and the figure the
hot-path work is measured by. Phases nest freely; a phase entered twice adds up.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from ttl.java import java_class

_GROUP = "spark.jobGroup.id"


class BatchPhases:
    """Timers for one batch; ``with phases.phase("write"): ...``.

    Inside a streaming query's ``foreachBatch`` the thread already carries the query's job
    group (``query.stop()`` cancels the running batch's jobs through it): it is kept, and
    the batch's jobs are those of the group that are new since the batch began. Only a
    thread without a group gets one of its own, removed again by ``close``.
    """

    def __init__(self, spark=None) -> None:
        self.started = time.monotonic()
        self.seconds: dict[str, float] = {}
        self._sc = spark.sparkContext if spark is not None else None
        self._own_group = False
        self._before: set[int] = set()
        self._compiled: int | None = None
        if self._sc is None:
            return
        self._group = self._sc.getLocalProperty(_GROUP)
        if self._group is None:
            self._group = f"ttl-batch-{uuid.uuid4().hex}"
            self._sc.setJobGroup(self._group, "ttl batch", interruptOnCancel=False)
            self._own_group = True
        self._before = self._job_ids()
        self._compiled = self._compiles()

    def _job_ids(self) -> set[int]:
        """The ids of the group's jobs that Spark still tracks (up to ``spark.ui.retainedJobs``,
        1,000: a stream's query group reaches that). Read as one string: py4j fetches a Java
        array's elements one call each, 52 ms for 1,000 ids, twice a batch; this is 5 ms."""
        tracker = self._sc._jsc.sc().statusTracker()
        text = java_class(self._sc, "java.util.Arrays").toString(
            tracker.getJobIdsForGroup(self._group))
        return {int(part) for part in text.strip("[]").split(",") if part.strip()}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        began = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.monotonic() - began

    def spark_jobs(self) -> int | None:
        """Spark jobs started by this thread since the batch began (``None`` without Spark)."""
        if self._sc is None:
            return None
        return len(self._job_ids() - self._before)

    def _compiles(self) -> int | None:
        """The driver JVM's count of code-generation compilations so far; ``None`` if it
        cannot be read (a diagnostic never fails a batch)."""
        try:
            return int(java_class(self._sc, "org.apache.spark.metrics.source.CodegenMetrics")
                       .METRIC_COMPILATION_TIME().getCount())
        except Exception:  # noqa: BLE001 - a figure for the log line, nothing depends on it
            return None

    def codegen_compiles(self) -> int | None:
        """Classes Spark's code generation compiled since the batch began, in the driver's
        JVM (background work included, executors elsewhere not; ``None`` without Spark or
        when the count cannot be read). Spark keeps the classes it
        compiled in a cache keyed by their source, so a steady stream compiles few per
        batch; many mean the cache is too small for the queries that keep running, and
        each batch then pays the compiler, and the JIT again for every new class
        (``conf/spark-defaults.conf``: ``spark.sql.codegen.cache.maxEntries``)."""
        if self._sc is None or self._compiled is None:
            return None
        now = self._compiles()
        return None if now is None else now - self._compiled

    def close(self) -> None:
        """Remove the group this object set (never the query's own)."""
        if self._own_group:
            self._sc.setLocalProperty(_GROUP, None)
            self._sc.setLocalProperty("spark.job.description", None)
            self._sc.setLocalProperty("spark.job.interruptOnCancel", None)

    def as_dict(self) -> dict[str, float]:
        out = {k: round(v, 3) for k, v in self.seconds.items()}
        out["total"] = round(time.monotonic() - self.started, 3)
        return out
