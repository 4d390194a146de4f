"""Standalone operations shared by the ``ttl`` CLI and the ``jobs/`` spark-submit scripts.

Each opens what it needs from the configuration (``ttl.runtime``), respects the store's
lease (a running stream owns the table), publishes the changelog up to the table's current
version before returning when Kafka is reachable, and returns a readable summary.
"""

from __future__ import annotations

import logging
import signal

from ttl import eviction, runtime, schedule
from ttl.changelog import topic
from ttl.changelog.publisher import read_progress
from ttl.config import Config, parse_duration_ms
from ttl.lease import Lease
from ttl.store import commit

log = logging.getLogger(__name__)

SKIPPED = "skipped: the stream owns the table (lease held by {holder})"


def _publish_if_possible(rt: runtime.Runtime) -> str:
    if rt.conf.kafka.bootstrap_servers == "embedded":
        return "changelog: not published now (embedded broker); the next `ttl run` publishes it"
    publisher = rt.publisher()
    result = publisher.publish()
    publisher.close()
    return f"changelog: published {result.records} records up to version {result.published_version}"


def _parse_ttl(raw: str | None) -> int | None:
    return None if raw in (None, "none") else parse_duration_ms(raw)


def evict(conf: Config, clock: str, now_ms: int | None, dry_run: bool,
          proposed_ttl: str | None = None) -> str:
    spark = runtime.session(conf)
    store = runtime.open_store(conf, spark)
    if dry_run and proposed_ttl is not None:
        ttl = _parse_ttl(proposed_ttl)
        return (f"dry run: a store TTL of {proposed_ttl} would evict "
                f"{eviction.would_evict(store, ttl, now_ms)} entries now")
    if not dry_run:
        lease = Lease(spark, store.path)
        other = lease.held_by_other()
        if other is not None:
            return SKIPPED.format(holder=other.holder)
    result = eviction.sweep(store, clock, now_ms, dry_run=dry_run)  # type: ignore[arg-type]
    lines = [result.summary()]
    if result.sample_keys:
        lines.append(f"sample keys: {[k.decode(errors='replace') for k in result.sample_keys]}")
    if not dry_run and not result.skipped:
        lines.append(_publish_if_possible(runtime.Runtime(conf, conf.kafka.bootstrap_servers,
                                                          spark, store)))
    return "\n".join(lines)


def alter(conf: Config, new_ttl: str, dry_run: bool) -> str:
    spark = runtime.session(conf)
    store = runtime.open_store(conf, spark, check_ttl=False)
    ttl = _parse_ttl(new_ttl)
    if not dry_run:
        other = Lease(spark, store.path).held_by_other()
        if other is not None:
            return SKIPPED.format(holder=other.holder)
    result = eviction.alter_ttl(store, ttl, dry_run=dry_run)
    head = "dry run: " if dry_run else ""
    text = (f"{head}TTL {result.old_ttl} ms -> {result.new_ttl} ms; entries the new TTL "
            f"evicts now: {result.would_evict_now}")
    if not dry_run:
        text += (f"\nexpires_at recomputed in version {result.version}; set store.ttl = "
                 f"{new_ttl!r} in {conf.source}")
        text += "\n" + _publish_if_possible(runtime.Runtime(conf, conf.kafka.bootstrap_servers,
                                                            spark, store))
    return text


def last_sweep(store) -> dict | None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    rows = (DeltaTable.forPath(store.spark, store.path).history()
            .where(F.get_json_object("userMetadata", "$.op") == "sweep")
            .orderBy(F.col("version").desc()).limit(1).collect())
    if not rows:
        return None
    meta = commit.decode(rows[0].userMetadata) or {}
    return {"version": rows[0].version, "clock": meta.get("clock"), "t": meta.get("t"),
            "evicted": (rows[0].operationMetrics or {}).get("numDeletedRows"),
            "at": str(rows[0].timestamp)}


def status(conf: Config) -> dict[str, object]:
    from delta.tables import DeltaTable

    spark = runtime.session(conf)
    store = runtime.open_store(conf, spark)
    table = spark.read.format("delta").load(store.path)
    now = store.now()
    version = DeltaTable.forPath(spark, store.path).history(1).first()["version"]
    out: dict[str, object] = {
        "store": conf.store.name, "table": store.path, "table version": version,
        "clock": f"{conf.eviction.clock} (now {now})",
        "live entries": store.live_frame(now).count(),
        "expired, not yet swept": table.where(eviction.expired_predicate(now)).count(),
        "stream time": store.stream_time.value,
        "last sweep": last_sweep(store),
        "dead letters": spark.read.format("delta").load(store.dead_letter_path).count(),
    }
    lease = Lease(spark, store.path).current()
    out["lease"] = (f"{lease.holder} until {lease.expires_at}" if lease else "free")
    if conf.kafka.bootstrap_servers != "embedded":
        progress = read_progress(conf.kafka, conf.kafka.bootstrap_servers,
                                 topic.progress_topic(conf.kafka.changelog_topic))
        out["published version"] = progress.version
        out["changelog lag (versions)"] = max(0, version - progress.version)
        out["changelog lag (seconds)"] = _seconds_behind(store, progress.version, version)
    else:
        out["changelog lag (versions)"] = "unknown (embedded broker not running)"
    return out


def _seconds_behind(store, published: int, current: int) -> float:
    """Age of the oldest unpublished commit (0 when everything is published)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    if published >= current:
        return 0.0
    row = (DeltaTable.forPath(store.spark, store.path).history(current - published)
           .where(F.col("version") == published + 1).select("timestamp").first())
    if row is None:
        return 0.0
    return max(0.0, store.wall_clock.now_ms() / 1000 - row.timestamp.timestamp())


def schedule_daemon(conf: Config) -> None:
    """``ttl schedule``: sweeps and maintenance until SIGTERM; skips while a stream runs."""
    spark = runtime.session(conf)
    store = runtime.open_store(conf, spark)
    rt = runtime.Runtime(conf, conf.kafka.bootstrap_servers, spark, store)
    publisher = None if conf.kafka.bootstrap_servers == "embedded" else rt.publisher()
    jobs = schedule.StoreJobs(store, conf, publish=publisher.publish if publisher else None,
                              lease=Lease(spark, store.path))
    extra = {}
    if conf.drill.interval and publisher is not None:
        from apscheduler.triggers.interval import IntervalTrigger

        def scheduled_drill() -> None:
            try:
                report = drill(conf, conf.kafka.bootstrap_servers)
                (log.info if report.match else log.error)("%s", report.summary())
            except Exception:  # noqa: BLE001 - logged; the next tick tries again
                log.exception("restore drill failed")

        extra["drill"] = (scheduled_drill, IntervalTrigger(seconds=conf.drill.interval / 1000))
    scheduler = schedule.build(conf, jobs, blocking=True, extra=extra)
    signal.signal(signal.SIGTERM, lambda *_: scheduler.shutdown(wait=False))
    log.info("scheduler for %s started: %s", conf.store.name,
             [job.name for job in scheduler.get_jobs()])
    try:
        scheduler.start()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        if publisher is not None:
            publisher.close()


def restore_store(conf: Config, bootstrap: str, *, target: str | None = None,
                  until_version: int | None = None, until_offsets: dict[int, int] | None = None,
                  converter: str = "engine", source_topic: str | None = None,
                  sweep_after: bool = True,
                  wall_clock=None) -> str:
    """``ttl restore``: rebuild a table from the changelog.

    Into the store's own table (disaster recovery, the default): refused under a live
    stream lease; then a sweep removes what expired meanwhile (with tombstones), and the
    publisher's progress moves to the restore's version, so the stream resumes after it.
    """
    from ttl import restore as restore_mod

    runtime.check_kafka_access(conf, bootstrap)
    spark = runtime.session(conf)
    into_store = target is None or target == conf.store.path
    path = conf.store.path if into_store else target
    if into_store:
        other = Lease(spark, path).held_by_other()
        if other is not None:
            return SKIPPED.format(holder=other.holder)
    result = restore_mod.restore(spark, conf, bootstrap, path, converter=converter,
                                 until_version=until_version, until_offsets=until_offsets,
                                 source_topic=source_topic)
    lines = [result.summary()]
    if into_store and sweep_after:
        store = runtime.open_store(conf, spark, wall_clock=wall_clock)
        rt = runtime.Runtime(conf, bootstrap, spark, store)
        publisher = rt.publisher()
        publisher.reset_progress(result.version, store.stream_time.value, result.input_offsets)
        swept = eviction.sweep(store, "wall")
        lines.append(swept.summary())
        if conf.eviction.clock in ("stream", "both"):
            lines.append(eviction.sweep(store, "stream").summary())
        published = publisher.publish()
        publisher.close()
        lines.append(f"changelog: published {published.records} records (the sweep's "
                     f"tombstones) up to version {published.published_version}")
        lines.append(f"input resumes at {result.input_offsets or 'the checkpoint'}: see the "
                     "README's restore runbook")
    return "\n".join(lines)


def drill(conf: Config, bootstrap: str, report_path=None, source_topic: str | None = None):
    """``ttl drill``: restore into scratch and diff with the table at the published version."""
    from ttl import drill as drill_mod

    runtime.check_kafka_access(conf, bootstrap)
    spark = runtime.session(conf)
    return drill_mod.run(spark, conf, bootstrap, report_path=report_path,
                         source_topic=source_topic)
