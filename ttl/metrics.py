"""Prometheus metrics of a store's streaming driver (``metrics.port`` in the profile).

The driver already knows every figure an operator wants on a dashboard: each batch's
outcome counts, its duration and phases, the sweeps' evictions and lateness, what the
publisher did and how far it lags, whether the lease is held. This module turns them into
``prometheus_client`` metrics on their own registry (two stores in one process, as in the
tests, never collide) and serves them over HTTP from a daemon thread; Kubernetes scrapes the
same port and uses it for the driver's liveness and readiness probes.

Every metric carries the ``store`` label. Names follow Prometheus conventions
(``_total`` counters, ``_seconds`` durations).
"""

from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

log = logging.getLogger(__name__)

#: Batch durations on this kind of machine run from a second to about a minute.
BATCH_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
#: Eviction lateness: from immediate to a day behind.
LATENESS_BUCKETS = (0.1, 1, 5, 10, 30, 60, 300, 900, 3600, 86400)


class Metrics:
    """One store's metrics; ``serve`` starts the HTTP endpoint."""

    def __init__(self, store: str) -> None:
        self.store = store
        self.registry = CollectorRegistry()
        r, s = self.registry, ["store"]
        self.records = Counter("ttl_records_total", "Input records by outcome (upserted, "
                               "deleted, delete_absent, late_dropped, expired_on_arrival, "
                               "rejected)", [*s, "outcome"], registry=r)
        self.dead_letters = Counter("ttl_dead_letters_total", "Records dead-lettered, by "
                                    "reason", [*s, "reason"], registry=r)
        self.batches = Counter("ttl_batches_total", "Micro-batches applied", s, registry=r)
        self.batch_seconds = Histogram("ttl_batch_duration_seconds", "Micro-batch duration",
                                       s, buckets=BATCH_BUCKETS, registry=r)
        self.phase_seconds = Counter("ttl_batch_phase_seconds_total", "Seconds spent per "
                                     "batch phase (read, lookup, fold, write, publish, sweep, "
                                     "...)", [*s, "phase"], registry=r)
        self.evicted = Counter("ttl_evicted_total", "Entries evicted by sweeps, by clock",
                               [*s, "clock"], registry=r)
        self.lateness = Histogram("ttl_eviction_lateness_seconds", "How long after expiring "
                                  "entries were swept (one observation per sweep: its "
                                  "median)", [*s, "clock"], buckets=LATENESS_BUCKETS,
                                  registry=r)
        self.published = Counter("ttl_changelog_records_total", "Changelog records published",
                                 s, registry=r)
        self.lag_versions = Gauge("ttl_changelog_lag_versions", "Table versions not yet on "
                                  "the changelog", s, registry=r)
        self.stream_time = Gauge("ttl_stream_time_ms", "The store's stream time (epoch ms)",
                                 s, registry=r)
        self.lease_held = Gauge("ttl_lease_held", "1 while this driver holds the store's "
                                "lease", s, registry=r)
        self._server = None

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        """Serve ``/metrics`` on ``port`` (a daemon thread; ``close`` stops it)."""
        self._server = start_http_server(port, addr=addr, registry=self.registry)
        log.info("metrics for store %s on http://%s:%s/metrics", self.store, addr, port)

    def close(self) -> None:
        if self._server is not None:
            server, thread = self._server
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)
            self._server = None

    # -- what the driver reports --------------------------------------------------------------

    def batch(self, counts, seconds: dict[str, float], stream_time: int | None) -> None:
        """One micro-batch: its outcome ``counts`` (``ttl.model.Counts``) and phase seconds
        (``total`` is the duration)."""
        store = self.store
        self.batches.labels(store).inc()
        for outcome in ("upserted", "deleted", "delete_absent", "late_dropped",
                        "expired_on_arrival"):
            self.records.labels(store, outcome).inc(getattr(counts, outcome))
        rejected = sum(counts.rejected.values())
        self.records.labels(store, "rejected").inc(rejected)
        for reason, n in counts.rejected.items():
            self.dead_letters.labels(store, reason).inc(n)
        for phase, secs in seconds.items():
            if phase == "total":
                self.batch_seconds.labels(store).observe(secs)
            else:
                self.phase_seconds.labels(store, phase).inc(secs)
        if stream_time is not None:
            self.stream_time.labels(store).set(stream_time)

    def publication(self, published) -> None:
        """One publication (``ttl.changelog.publisher.PublishResult``)."""
        if published is None:
            return
        self.published.labels(self.store).inc(published.records)
        self.lag_versions.labels(self.store).set(published.lag_versions)

    def sweep(self, result) -> None:
        """One sweep (``ttl.eviction.SweepResult``) that evicted something."""
        if result is None or not result.evicted or result.dry_run:
            return
        self.evicted.labels(self.store, result.clock).inc(result.evicted)
        median = (result.lateness_ms or {}).get("p50")
        if median is not None:
            self.lateness.labels(self.store, result.clock).observe(max(0.0, median / 1000))
