"""APScheduler wiring: wall-clock sweeps, OPTIMIZE, VACUUM and drills.

Used two ways with the same jobs: a ``BackgroundScheduler`` inside the streaming driver (its
writes serialized with the micro-batches through one lock) and a ``BlockingScheduler`` for
the standalone daemon ``ttl schedule`` (``run_daemon``; stores whose stream is not running:
each run takes the store's lease through the guard of ``ttl.app``, and skips while a stream
holds it).
Never two runs of a job at once (``max_instances=1``), missed runs coalesce into one, and a
failed run is logged and tried again at the next tick.
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import threading
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.schedulers.blocking import BlockingScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from ttl import delta_log, eviction
from ttl.config import Config
from ttl.errors import ChangelogMismatch, LogCleanupRefused, StoreMissing, VacuumRefused
from ttl.names import PROP_OPTIMIZED_AT, PROP_VACUUMED_AT

log = logging.getLogger(__name__)


class StoreJobs:
    """The scheduled work of one store; every write holds ``lock``."""

    def __init__(self, store, conf: Config, *, lock: threading.Lock | None = None,
                 publish: Callable[[], object] | None = None,
                 guard: Callable[[], str | None] | None = None,
                 release: Callable[[], None] | None = None,
                 published: Callable[[], int | None] | None = None,
                 on_sweep: Callable[[eviction.SweepResult], None] | None = None,
                 warm: bool = False) -> None:
        self.store = store
        self.conf = conf
        self.lock = lock or threading.Lock()
        self.publish = publish
        self.guard = guard  # standalone daemon: takes the lease, or says why not to write
        self.release = release  # gives the lease back after each run
        # The table version the changelog has (measured: the publisher's progress), or None
        # when unknown; VACUUM never removes the change data of what is not published.
        self.published = published
        self.on_sweep = on_sweep  # the driver's metrics
        # A stream's jobs: its next batch needs the snapshot a sweep's commit makes, so the
        # sweep computes it in the background (``eviction.sweep``'s ``warm``); the daemon's
        # have no batch after them.
        self.warm = warm
        # Told when a job meets a store it can no longer write (its table removed or
        # replaced, the changelog no longer continuing it): no later tick can succeed, so
        # the daemon (or the stream) stops with it instead of failing every tick.
        self.on_fatal: Callable[[BaseException], None] | None = None
        self.failed: BaseException | None = None
        self.last_sweep: eviction.SweepResult | None = None
        self.evicted_total = 0

    def _owned_elsewhere(self, what: str) -> bool:
        reason = self.guard() if self.guard is not None else None
        if reason is not None:
            log.info("%s %s", what, reason)
            return True
        return False

    def _guarded(self, what: str, action: Callable[[], object]) -> object | None:
        # Lease, write and release all under the lock: the daemon's jobs run on a thread
        # pool and share one lease, so one job's release must not end another's write.
        with self.lock:
            if self._owned_elsewhere(what):
                return None
            try:
                result = action()
                if self.publish is not None:
                    self.publish()
                # Now and then (a daemon's sweeps may be the only commits for weeks): the
                # input position and stream time then outlive the batches' commits.
                self.store.raise_stream_time_floor(getattr(result, "version", None))
                return result
            except (StoreMissing, ChangelogMismatch) as exc:
                log.error("%s failed: %s", what, exc)
                self.failed = exc
                if self.on_fatal is not None:
                    self.on_fatal(exc)
                return None
            except (VacuumRefused, LogCleanupRefused) as exc:  # an expected wait, not a fault
                log.warning("%s", exc.operator_message())
                return None
            except Exception:  # noqa: BLE001 - logged; the next tick tries again
                log.exception("%s failed; will retry at the next tick", what)
                return None
            finally:
                if self.release is not None:
                    self.release()

    def wall_sweep(self) -> eviction.SweepResult | None:
        result = self._guarded("wall sweep",
                               lambda: eviction.sweep(self.store, "wall", warm=self.warm))
        if result is not None:
            # outside the lock: batches need not wait for it
            eviction.measure_lateness(self.store, result)  # type: ignore[arg-type]
            self.last_sweep = result  # type: ignore[assignment]
            self.evicted_total += result.evicted  # type: ignore[union-attr]
            if self.on_sweep is not None:
                self.on_sweep(result)  # type: ignore[arg-type]
        return result  # type: ignore[return-value]

    def optimize(self) -> None:
        m = self.conf.maintenance
        self._guarded("optimize", lambda: eviction.optimize(
            self.store, m.cluster_by, m.optimize_file_bytes, incremental=True))

    def vacuum(self) -> None:
        m = self.conf.maintenance

        def publish_then_vacuum() -> None:
            if self.publish is not None:
                self.publish()  # what can be published first: the lag measured is then real
            eviction.vacuum(self.store, m.vacuum_retention, m.minimum_retention,
                            self.published() if self.published is not None else None)

        self._guarded("vacuum", publish_then_vacuum)

    def clean_log(self) -> None:
        """The log's clean-up: checked and prepared under the lock (and the lease), then
        run outside it, where it lists and removes files while batches commit (it commits
        nothing; Delta runs it after its checkpoints, beside other writers)."""
        m = self.conf.maintenance

        def publish_then_prepare() -> bool:
            if self.publish is not None:
                self.publish()  # as VACUUM: the lag measured is then real
            eviction.prepare_log_cleanup(
                self.store, m.log_retention_ms,
                self.published() if self.published is not None else None)
            return True

        if self._guarded("log clean-up", publish_then_prepare):
            try:
                eviction.remove_old_log(self.store, m.log_retention_ms)
            except Exception:  # noqa: BLE001 - logged; the next tick tries again
                log.exception("log clean-up failed; will retry at the next tick")


def _seconds(ms: int) -> float:
    return ms / 1000.0


#: How long after a start an overdue maintenance job runs: the stream's first batches go
#: first (a backlog after an outage waits for no Z-order), and a job that brings the
#: driver down (out of memory) leaves it this long to make progress at every restart.
OVERDUE_DELAY_MS = 600_000


def first_run(last_done: str | None, interval_ms: int, now_ms: int) -> dt.datetime | None:
    """When a maintenance job first runs after a start: an interval after it last finished
    (``last_done``, the table's record in wall-clock ms), ``OVERDUE_DELAY_MS`` after the
    start (at most an interval) when that is past, and ``None`` (an interval after the
    start) when the table has no record. A stream restarted more often than the interval
    (deploys, a lost lease) would otherwise never VACUUM: what VACUUM bounds (removed
    files, change data, expired-keys rows) would grow for as long as it kept restarting.
    A record in the future (another host's clock) counts as now."""
    if last_done is None or not last_done.isdigit():
        return None
    due_ms = min(int(last_done), now_ms) + interval_ms
    due_ms = max(due_ms, now_ms + min(OVERDUE_DELAY_MS, interval_ms))
    return dt.datetime.fromtimestamp(due_ms / 1000, tz=dt.timezone.utc)


def build(conf: Config, jobs: StoreJobs, *, blocking: bool, extra: dict | None = None):
    """A scheduler with the store's jobs; ``extra`` maps names to (callable, trigger)."""
    defaults = {"max_instances": 1, "coalesce": True,
                "misfire_grace_time": max(1, int(_seconds(conf.eviction.misfire_grace)))}
    scheduler = (BlockingScheduler if blocking else BackgroundScheduler)(
        job_defaults=defaults, timezone="UTC")
    ev = conf.eviction
    if ev.clock in ("wall", "both"):
        trigger = (CronTrigger.from_crontab(ev.cron, timezone="UTC") if ev.cron
                   else IntervalTrigger(seconds=_seconds(ev.interval)))
        scheduler.add_job(jobs.wall_sweep, trigger, id="wall-sweep", name="wall-clock sweep")
    m = conf.maintenance
    done = delta_log.properties(jobs.store.spark, jobs.store.path) if (
        m.optimize_interval or m.vacuum_interval) else {}
    now_ms = jobs.store.wall_clock.now_ms()
    for job, interval, prop, name in ((jobs.optimize, m.optimize_interval, PROP_OPTIMIZED_AT,
                                       "OPTIMIZE"),
                                      (jobs.vacuum, m.vacuum_interval, PROP_VACUUMED_AT,
                                       "VACUUM")):
        if interval:
            first = first_run(done.get(prop), interval, now_ms)
            # Late is fine for housekeeping: a start-up's catch-up publication may take
            # longer than the grace, and a skipped overdue run would wait an interval more.
            scheduler.add_job(job, IntervalTrigger(seconds=_seconds(interval)),
                              id=name.lower(), name=name, misfire_grace_time=None,
                              **({"next_run_time": first} if first is not None else {}))
    if m.log_cleanup_interval:  # cheap and idempotent: no record of its last run
        scheduler.add_job(jobs.clean_log, IntervalTrigger(seconds=_seconds(
            m.log_cleanup_interval)), id="log-cleanup", name="log clean-up",
            misfire_grace_time=None)
    for name, (func, trigger) in (extra or {}).items():
        scheduler.add_job(func, trigger, id=name, name=name)
    return scheduler


def run_daemon(conf: Config, jobs: StoreJobs, *, extra: dict | None = None) -> None:
    """``ttl schedule``: run the store's jobs on a blocking scheduler until SIGTERM/Ctrl-C."""
    scheduler = build(conf, jobs, blocking=True, extra=extra)
    jobs.on_fatal = lambda _: scheduler.shutdown(wait=False)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.shutdown(wait=False))
    log.info("scheduler for %s started: %s", conf.store.name,
             [job.name for job in scheduler.get_jobs()])
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        if scheduler.running:  # its pool's workers would keep the process alive
            scheduler.shutdown(wait=False)
    if jobs.failed is not None:  # a restarted daemon opens the store (a restored one) anew
        raise jobs.failed
