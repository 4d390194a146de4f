"""``ttl status``: what an operator asks first about a store, in one place.

Entries live and expired-not-yet-swept, stream time, the last sweep, dead letters, the lease,
and how far the changelog lags behind the table (in versions and in seconds: the age of the
oldest commit not yet published). Log reads go through ``ttl.delta_log``.
"""

from __future__ import annotations

from datetime import datetime, timezone

from ttl import delta_log, eviction
from ttl.changelog.format import version_offset
from ttl.changelog.publisher import read_progress
from ttl.kafka import KafkaClients
from ttl.lease import Lease
from ttl.names import OP_SWEEP, progress_topic


def last_sweep(store) -> dict | None:
    """The latest sweep commit: version, clock, T, entries evicted, commit time."""
    found = delta_log.last_engine_commit(store.spark, store.path, op=OP_SWEEP)
    if found is None:
        return None
    meta = found.metadata or {}
    at = datetime.fromtimestamp(found.timestamp_s, timezone.utc).isoformat(timespec="seconds")
    return {"version": found.version, "clock": meta.get("clock"), "t": meta.get("t"),
            "evicted": found.metric("numDeletedRows") if found.metrics else None, "at": at}


def seconds_behind(store, published: int, current: int) -> float:
    """Age of the oldest unpublished commit (0 when everything is published)."""
    if published >= current:
        return 0.0
    oldest = delta_log.commit_at(store.spark, store.path, published + 1)
    if oldest is None:
        return 0.0
    return max(0.0, store.wall_clock.now_ms() / 1000 - oldest.timestamp_s)


def status(store, lease: Lease, kafka: KafkaClients | None) -> dict[str, object]:
    """The store's status; ``kafka`` is ``None`` when the brokers are not reachable now (the
    embedded broker runs only inside ``ttl run``), and the changelog lag is then unknown."""
    spark = store.spark
    table = spark.read.format("delta").load(store.path)
    now = store.now()
    version = delta_log.latest_version(spark, store.path)
    out: dict[str, object] = {
        "store": store.conf.name, "table": store.path, "table version": version,
        "clock": f"{store.clock_kind} (now {now})",
        "live entries": store.live_frame(now).count(),
        "expired, not yet swept": table.where(eviction.expired_predicate(now)).count(),
        "stream time": store.stream_time.value,
        "last sweep": last_sweep(store),
        "dead letters": spark.read.format("delta").load(store.dead_letter_path).count(),
    }
    held = lease.current()
    out["lease"] = f"{held.holder} until {held.expires_at}" if held else "free"
    if kafka is None:
        out["changelog lag (versions)"] = "unknown (embedded broker not running)"
        return out
    progress = read_progress(kafka, progress_topic(kafka.conf.changelog_topic))
    published = progress.version - version_offset(store.properties)  # a Delta version
    out["published version"] = published
    out["changelog lag (versions)"] = max(0, version - published)
    out["changelog lag (seconds)"] = seconds_behind(store, published, version)
    return out
