"""The commands' bodies: each sequences the steps of one ``ttl`` command on an ``App``.

What a step means lives in its own module (eviction, restore, the publisher...); how the parts
are built from a profile lives in ``ttl.app``. The command line (``ttl.cli``) and the
``jobs/`` scripts call these functions, so a command run by hand, by a scheduler or by
spark-submit is the same code.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from ttl import config, delta_log, eviction, schedule
from ttl import drill as drill_mod
from ttl import restore as restore_mod
from ttl import status as status_mod
from ttl import upgrade as upgrade_mod
from ttl.app import App, with_kafka
from ttl.bars import SparkProgress, bar, move_to
from ttl.changelog import continuity, topic
from ttl.changelog.format import table_version
from ttl.changelog.progress import published_progress
from ttl.changelog.publisher import table_at_path
from ttl.config import Config, parse_ttl_ms
from ttl.errors import ConfigError, PublisherFenced, RestoreError, TtlError
from ttl.lease import Lease
from ttl.local import sample
from ttl.names import LEASE_SUFFIX, progress_topic, sibling
from ttl.phases import BatchPhases
from ttl.store import DeltaStore, layout
from ttl.stream import StreamJob, take_lease

log = logging.getLogger(__name__)


def _parse_ttl(raw: str | None) -> int | None:
    try:
        return None if raw in (None, "none") else parse_ttl_ms(raw)
    except ValueError as exc:
        raise ConfigError(f"--ttl: {exc}") from None


# -- the streaming job ---------------------------------------------------------------------

def ensure_input_topic(app: App, *, create: bool) -> int:
    """Partition count of the input topic; create it (embedded profile) or fail naming it."""
    k = app.conf.kafka
    found = app.kafka.partitions(k.input_topic)
    if found is not None:
        return found
    if not create:
        raise ConfigError(f"{app.conf.source}: kafka.input_topic = {k.input_topic!r} does not "
                          f"exist on {app.kafka.bootstrap}")
    app.kafka.create_topic(k.input_topic, k.input_partitions)
    return k.input_partitions


def run(conf: Config, *, available_now: bool = False, demo_seconds: int | None = None) -> str:
    """``ttl run``: start everything the profile names, run the stream, return the summary.

    With ``demo_seconds`` (the embedded default) a sample producer feeds the input topic and
    the job stops itself after that many seconds.
    """

    startup = BatchPhases()  # where the start-up's time goes: the "stream started" line
    with with_kafka(conf) as app:
        with startup.phase("kafka"):
            app.check_kafka()
            ensure_input_topic(app, create=conf.kafka.embedded)
            if conf.kafka.embedded:
                topic.create(app.kafka, conf.changelog, conf.store.max_record_bytes)
        with startup.phase("spark"):
            app.spark  # noqa: B018 - starts the session
        with startup.phase("store"):
            store = app.store(create=True)  # a new store's table; never a lost one's
        with startup.phase("lease"):
            lease = app.lease(duration_ms=conf.eviction.lease,
                              holder=f"stream:{conf.store.name}")
            # The lease first: creating the publisher fences any live producer of this
            # store's changelog, so a second `ttl run` must not get that far while the
            # first runs.
            take_lease(lease, conf.store.name, conf.eviction.lease)
        store.lease = lease  # every commit of the stream checks it (twins share it)
        publisher = None
        try:
            with startup.phase("publisher"):
                publisher = app.publisher()
            job = StreamJob(conf, app.spark, store, app.kafka, publisher, lease)
        except BaseException:
            if publisher is not None:
                publisher.close()
            lease.release()
            raise
        feeder = _demo_feeder(app, job, demo_seconds) if demo_seconds else None
        job.run(available_now=available_now, startup=startup)
        if feeder is not None:
            feeder.join(timeout=30)
        live = store.live_frame().count()
        return (f"summary: {job.summary.line()} live_entries={live} "
                f"stream_time={store.stream_time.value}")


def _demo_feeder(app: App, job, seconds: int) -> threading.Thread:
    spec = sample.SampleSpec(records=int(seconds * 25), rate=50.0)
    feeder = threading.Thread(target=sample.produce, daemon=True, args=(app.kafka, spec),
                              kwargs={"stop": job.stopping})
    feeder.start()

    def stop_later() -> None:  # the demo runs this long once the query is up
        job.query_started.wait()
        threading.Timer(seconds, job.stop).start()

    threading.Thread(target=stop_later, daemon=True).start()
    log.info("demo: feeding %d sample records over %d s into %s", spec.records,
             spec.records // 50, app.conf.kafka.input_topic)
    return feeder


# -- standalone operations -----------------------------------------------------------------

def evict(app: App, clock: str, now_ms: int | None, dry_run: bool,
          proposed_ttl: str | None = None) -> str:
    """``ttl evict``: one sweep (or a dry run), then publish its tombstones."""
    store = app.store()
    if dry_run and proposed_ttl is not None:
        ttl = _parse_ttl(proposed_ttl)
        return (f"dry run: a store TTL of {proposed_ttl} would evict "
                f"{eviction.would_evict(store, ttl, now_ms)} entries now")
    with app.claimed(not dry_run) as skipped:
        if skipped is not None:
            return skipped
        result = _sweep_with_a_bar(store, clock, now_ms, dry_run)
        published = app.publish_now() if not dry_run and not result.skipped else None
        eviction.measure_lateness(store, result)  # after the tombstones are out
        lines = [result.summary()]
        if result.sample_keys:
            lines.append(f"sample keys: "
                         f"{[k.decode(errors='replace') for k in result.sample_keys]}")
        if published is not None:
            lines.append(published)
        return "\n".join(lines)


def _sweep_with_a_bar(store, clock: str, now_ms: int | None, dry_run: bool):
    """A standalone sweep, with a bar over its Spark tasks on a terminal (a big table's
    DELETE can take minutes)."""

    with bar(100, f"{clock} sweep of {store.conf.name}", unit="%") as shown, \
            SparkProgress(store.spark, lambda f: move_to(shown, round(100 * f)), every_s=1.0):
        return eviction.sweep(store, clock, now_ms, dry_run=dry_run)  # type: ignore[arg-type]


def alter(app: App, new_ttl: str, dry_run: bool) -> str:
    """``ttl alter``: change the store TTL (expires_at recomputed in one published commit)."""
    ttl = _parse_ttl(new_ttl)
    store = app.store(check_ttl=False)
    with app.claimed(not dry_run) as skipped:
        if skipped is not None:
            return skipped
        result = eviction.alter_ttl(store, ttl, dry_run=dry_run)
        head = "dry run: " if dry_run else ""
        text = (f"{head}TTL {result.old_ttl} ms -> {result.new_ttl} ms; entries the new TTL "
                f"evicts now: {result.would_evict_now}; entries already expired, which stay "
                f"expired (the next sweep removes them): {result.stay_expired}")
        if not dry_run:
            text += (f"\nexpires_at recomputed in version {result.version}; set store.ttl = "
                     f"{new_ttl!r} in {app.conf.source}")
            text += "\n" + app.publish_now(store)  # the new TTL differs from the profile's
        return text


def status(app: App) -> dict[str, object]:
    """``ttl status``: read with delta-rs, no Spark (``ttl.status``)."""

    if app.kafka_reachable:
        app.check_kafka()
    wall = app.wall_clock.now_ms() if app.wall_clock is not None else None
    return status_mod.status(app.conf, app.kafka if app.kafka_reachable else None,
                             wall_ms=wall)


def health(app: App, require_stream: bool) -> object:
    """``ttl health``: an exit code for probes (``ttl.status.health``)."""

    if app.kafka_reachable:
        try:
            app.check_kafka()
        except TtlError as exc:  # a probe's answer is its exit code: 1, with the reason
            return status_mod.Health(False, [exc.operator_message().splitlines()[0]])
    return status_mod.health(app.conf, app.kafka if app.kafka_reachable else None,
                             require_stream=require_stream)


def schedule_daemon(app: App) -> None:
    """``ttl schedule``: sweeps, maintenance and drills until SIGTERM; each run takes the
    store's lease for its write and skips while a stream holds it. The daemon's publisher is
    made inside the first run that holds the lease (made earlier, its transactional init
    would fence a live stream's publisher) and remade after it was fenced."""
    if app.kafka_reachable:
        app.check_kafka()  # before Spark starts
    publisher = _DaemonPublisher(app) if app.kafka_reachable else None
    jobs = schedule.StoreJobs(app.store(), app.conf,
                              publish=publisher.publish if publisher else None,
                              published=publisher.published if publisher else None,
                              guard=app.guard, release=app.release)
    extra = {}
    if app.conf.drill.interval and publisher is not None:
        from apscheduler.triggers.interval import IntervalTrigger

        def scheduled_drill() -> None:
            try:
                report = drill(app)
                (log.info if report.match else log.error)("%s", report.summary())
            except Exception:  # noqa: BLE001 - logged; the next tick tries again
                log.exception("restore drill failed")

        extra["drill"] = (scheduled_drill,
                          IntervalTrigger(seconds=app.conf.drill.interval / 1000))
    try:
        schedule.run_daemon(app.conf, jobs, extra=extra)
    finally:
        if publisher is not None:
            publisher.close()


class _DaemonPublisher:
    """The daemon's publisher, made on first use (under the lease) and after a fencing."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.publisher = None

    def publish(self) -> object:
        if self.publisher is None:
            self.publisher = self.app.publisher()
        try:
            return self.publisher.publish()
        except PublisherFenced:
            self.close()  # a stream ran meanwhile; the next run makes a new one
            raise

    def published(self) -> int | None:
        """The table version the changelog has, measured now: the progress topic and the
        table's version offset read again (this daemon's publisher may be stale: another
        process may have published, or restored the table, since it was made)."""

        progress = published_progress(self.app.kafka,
                                      progress_topic(self.app.conf.kafka.changelog_topic))
        if progress is None:
            return None
        path = self.app.conf.store.path
        return table_version(progress.version, delta_log.properties(self.app.spark, path))

    def close(self) -> None:
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None


def publish(app: App, *, reseed: bool = False) -> str:
    """``ttl publish``: publish the versions not yet on the changelog; with ``reseed``,
    publish the table's current state as a snapshot instead (after ``ChangeFeedGone``)."""
    if not app.kafka_reachable:
        return app.publish_now()  # says why nothing can be published now
    app.check_kafka()
    with app.claimed() as skipped:
        if skipped is not None:
            return skipped
        publisher = app.publisher()
        try:
            result = publisher.reseed() if reseed else publisher.publish()
        finally:
            publisher.close()
    what = "re-seeded with the table's state" if reseed else "published"
    return (f"changelog: {what}: {result.records} records ({result.puts} puts, "
            f"{result.tombstones} tombstones) up to changelog version "
            f"{result.published_version}")


def restore(app: App, *, target: str | None = None, until_version: int | None = None,
            until_offsets: dict[int, int] | None = None, converter: str = "engine",
            source_topic: str | None = None, sweep_after: bool = True) -> str:
    """``ttl restore``: rebuild a table from the changelog.

    Into the store's own table (disaster recovery, the default): refused under a live
    stream lease; then ``restore.finish_recovery`` sweeps and moves the publisher's progress.
    """

    app.check_kafka()
    conf = app.conf
    into_store = target is None or config.same_location(target, conf.store.path)
    path = conf.store.path if into_store else target
    if into_store:
        _refuse_a_partial_source(conf, until_version, until_offsets, converter, source_topic)
    else:
        app.refuse_an_unsafe_target("--target", path)
    with app.claimed(into_store) as skipped, \
            _claimed_target(app, None if into_store else path) as target_lease:
        if skipped is not None:
            return skipped
        if into_store:
            _publish_before_restore(app)
        result = restore_mod.restore(
            app.spark, conf, app.kafka, path, converter=converter, until_version=until_version,
            until_offsets=until_offsets, source_topic=source_topic,
            before_write=None if target_lease is None else
            (lambda: target_lease.check(app.spark, path)))
        lines = [result.summary()]
        if into_store and sweep_after:
            publisher = app.publisher()
            try:
                lines += restore_mod.finish_recovery(result, app.store(), publisher,
                                                     conf.eviction.clock)
            finally:
                publisher.close()
        return "\n".join(lines)


@contextlib.contextmanager
def _claimed_target(app: App, target: str | None) -> Iterator[Lease | None]:
    """A restore's ``--target`` that is a store's table (its lease table beside it) is
    claimed as a standalone command claims its own store, and yielded (``None`` when
    nothing is claimed): a live holder (that store's stream, or a command) refuses the
    restore before anything is read, since the overwrite would replace the rows it
    commits; a lapsed holder's lease is taken over (which fences that store, as every
    taking does) and held until the restore ends, whose commits check it first. A table
    of another store, or another TTL, is refused by its layout before anything is taken."""
    if target is None or not (delta_log.is_delta_table(app.spark, target)
                              and delta_log.is_delta_table(app.spark,
                                                           sibling(target, LEASE_SUFFIX))):
        yield None
        return
    conf = app.conf
    layout.ensure_store_table(app.spark, target, conf.store.name, conf.store.ttl, create=False)
    lease = Lease(app.spark, target, duration_ms=conf.eviction.lease,
                  holder=f"restore:{conf.store.name}")
    try:
        taken = lease.acquire(wait=True)
    except BaseException:
        lease.release()  # the row may name us already (its fence commit failed)
        raise
    if not taken:
        other = lease.held_by_other()
        raise RestoreError(
            f"--target {target} is a store's table, and "
            f"{other.holder if other else 'another writer'} holds its lease: the restore "
            "would overwrite the rows it commits. Operator action: stop that writer (its "
            "stream or command) first, or restore into a new path")
    lease.start_heartbeat()
    try:
        yield lease
    finally:
        lease.release()


def _refuse_a_partial_source(conf: Config, until_version, until_offsets, converter: str,
                             source_topic: str | None) -> None:
    """Into the store's own table only its own whole changelog may be restored: the store's
    changelog must stay able to rebuild the table, and it holds neither a foreign topic's
    keys nor the rollback of a point-in-time restore."""

    why = []
    if source_topic not in (None, conf.kafka.changelog_topic):
        why.append(f"--topic {source_topic} is not the store's changelog")
    if converter != "engine":
        why.append(f"--converter {converter} reads a foreign changelog")
    if until_version is not None or until_offsets is not None:
        why.append("a point-in-time restore (--until-version/--until-offsets) rolls back "
                   "changes the changelog keeps")
    if why:
        raise RestoreError(
            f"refusing to restore into the store's own table {conf.store.path}: "
            f"{'; '.join(why)}, so its changelog ({conf.kafka.changelog_topic}) could no "
            "longer rebuild it. Operator action: restore into another path with --target, "
            "drill or inspect it, then point store.path at it")


def _publish_before_restore(app: App) -> None:
    """Versions the table committed but never published would be lost by a restore (the
    input offsets move past them): publish them first, or refuse."""

    path = app.conf.store.path
    if not delta_log.is_delta_table(app.spark, path):
        return  # the table is gone (the disaster): nothing of it can be published
    table = table_at_path(app.spark, path)
    if table.restore_pending:
        return  # an earlier restore's unfinished table: nothing of it was ever published
    latest = table.newest  # on the changelog's scale
    name = progress_topic(app.conf.kafka.changelog_topic)
    published = published_progress(app.kafka, name)
    if published is None:
        raise RestoreError(f"{path} exists but the changelog has no progress topic {name}: "
                           "which of its versions are published is unknown, so a restore "
                           "could lose some. Operator action: create the topics (`ttl topic "
                           "create`) and publish (`ttl run`) first, or restore elsewhere "
                           "with --target")
    # A table that does not continue the changelog (created again at the path, replaced)
    # may hold writes nobody published: the restore would overwrite them unseen.
    why = continuity.refusal(table, continuity.PublishedSoFar(
        app.conf.kafka.changelog_topic, published.highest, published.table_id))
    if why is not None:
        raise RestoreError(f"refusing to restore over {path}: {why}")
    if published.version >= latest:
        return
    log.info("restore: publishing versions %s..%s of %s first", published.version + 1, latest,
             path)
    try:
        publisher = app.publisher()
        try:
            publisher.publish()
        finally:
            publisher.close()
    except Exception as exc:
        raise RestoreError(
            f"{path} has versions {published.version + 1}..{latest} not yet on the "
            f"changelog and they could not be published ({exc}); a restore now would lose "
            "them. Operator action: fix what stops publication (or, if the table itself is "
            "lost, move it away) and run the restore again") from exc


def drill(app: App, report_path: Path | None = None, source_topic: str | None = None):
    """``ttl drill``: restore into scratch and diff with the table at the published version."""

    app.check_kafka()
    return drill_mod.run(app.spark, app.conf, app.kafka, report_path=report_path,
                         source_topic=source_topic)


def upgrade(app: App, rollback: bool) -> str:
    """``ttl upgrade``: format v1/v2 -> v3 in place (resumable), then the file layout of
    ``maintenance.cluster_by`` (one OPTIMIZE now, rather than at the schedule's next: files
    ordered by ``key_hash`` are what small batches skip by; a Z-order rewrites the whole
    table each time); or roll the format back (the OPTIMIZE changed no row, so a rollback
    is still allowed after it)."""

    if rollback:
        with app.claimed() as skipped:
            return skipped if skipped is not None else upgrade_mod.rollback(app.spark,
                                                                            app.conf)
    with app.claimed() as skipped:
        if skipped is not None:
            return skipped
        done = upgrade_mod.upgrade_in_place(app.spark, app.conf)
        m = app.conf.maintenance
        # the table exists (it was just upgraded or checked): no changelog to consult
        store = DeltaStore(app.spark, app.conf.store, clock=app.conf.eviction.clock,
                           wall_clock=app.wall_clock, create=False)
        before = delta_log.file_count(store.spark, store.path)
        eviction.optimize(store, m.cluster_by, m.optimize_file_bytes)
        after = delta_log.file_count(store.spark, store.path)
        order = "expiry group, then key_hash" if m.cluster_by == "both" else m.cluster_by
        return (f"{done}\nlayout: files ordered by {order} (OPTIMIZE: {before} files "
                f"before, {after} after; no row changed, nothing to publish)")


def create_topics(app: App) -> list[str]:
    """``ttl topic create``: the changelog and progress topics, if missing."""

    app.check_kafka()
    return topic.create(app.kafka, app.conf.changelog, app.conf.store.max_record_bytes)


def check_topics(app: App):
    """``ttl topic check``: refuse a changelog or progress topic that breaks a rule."""

    app.check_kafka()
    return topic.check(app.kafka, None, app.conf.store.max_record_bytes)
