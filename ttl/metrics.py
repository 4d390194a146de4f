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
import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily

from ttl import delta_rs, status
from ttl.config import MetricsConfig
from ttl.names import DRILLS_SUFFIX, sibling

log = logging.getLogger(__name__)

#: Batch durations on this kind of machine run from a second to about a minute.
BATCH_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300)
#: Eviction lateness: from immediate to a day behind.
LATENESS_BUCKETS = (0.1, 1, 5, 10, 30, 60, 300, 900, 3600, 86400)


class TableFigures:
    """Figures read from the tables (delta-rs, no Spark) by a thread of their own, every
    ``every_s``: entries expired but not yet swept (at the store's clock), the changelog's
    lag in seconds, and the last restore drill's result and time (the drill-history table,
    written by whichever process runs drills). A failed read leaves the figure out until
    the next one succeeds.

    A scrape only copies the last values: its time does not grow with the table or wait on
    Kafka, so a liveness probe with a one-second timeout never sees the reads (before the
    first read ends, the figures are absent)."""

    def __init__(self, conf, every_s: float = 30.0, kafka=None) -> None:
        self.conf = conf
        self.kafka = kafka  # for the changelog's lag in seconds (None: not exported)
        self.every_s = every_s
        self._lock = threading.Lock()
        self._values: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def refresh(self) -> None:
        """Read the figures now (the thread's step; tests call it directly)."""
        values = self._read()
        with self._lock:
            self._values = values

    def start(self) -> None:
        """The reading thread (a daemon), once."""
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(target=self._run, name="ttl-table-figures",
                                            daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.refresh()
            self._stop.wait(self.every_s)

    def _read(self) -> dict[str, float]:
        values: dict[str, float] = {}
        try:  # what `ttl status` reads, without Spark
            out = status.status(self.conf, self.kafka)
            values["expired"] = out["expired, not yet swept"]
            lag = out.get("changelog lag (seconds)")
            if isinstance(lag, float):
                values["lag_seconds"] = lag
        except Exception:  # noqa: BLE001 - a scrape never fails the job
            log.debug("status read failed", exc_info=True)
        drills = sibling(self.conf.store.path, DRILLS_SUFFIX)
        try:
            table = delta_rs.table_if_exists(drills, delta_rs.profile_options(self.conf))
            if table is not None:
                rows = status.query({"d": table},  # SQL: any table features
                                    "SELECT match, started_at FROM d ORDER BY started_at "
                                    "DESC LIMIT 1").to_pylist()
                if rows:
                    values["drill_match"] = 1.0 if rows[0]["match"] else 0.0
                    values["drill_at"] = rows[0]["started_at"] / 1000
        except Exception:  # noqa: BLE001
            log.debug("drill history read failed", exc_info=True)
        return values

    def collect(self):
        self.start()
        with self._lock:
            values = dict(self._values)
        store = self.conf.store.name
        for key, name, doc in TABLE_FIGURES:
            if key in values:
                family = GaugeMetricFamily(name, doc, labels=["store"])
                family.add_metric([store], values[key])
                yield family


#: The gauges read from the tables in the background (``TableFigures``): (its key, metric
#: name, help).
TABLE_FIGURES = (
    ("expired", "ttl_expired_not_swept", "Entries past their expiry that no sweep has "
     "removed yet (read every 30 s)"),
    ("drill_match", "ttl_last_drill_match", "1 if the last restore drill matched the "
     "table, 0 if not"),
    ("drill_at", "ttl_last_drill_timestamp_seconds", "When the last restore drill started "
     "(epoch seconds)"),
    ("lag_seconds", "ttl_changelog_lag_seconds", "Age of the oldest table version not yet "
     "on the changelog (0: everything published)"),
)


def exported_names(metrics: Metrics) -> set[str]:
    """Every sample name ``/metrics`` can show (a counter's ``_total``, a histogram's
    ``_bucket``, ``_sum`` and ``_count``), for dashboards and alert rules to be checked
    against."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"),
                "gauge": ("",)}
    names = {family.name + suffix for family in metrics.registry.collect()
             if family.name.startswith("ttl_")
             for suffix in suffixes.get(family.type, ("",))}
    return names | {name for _, name, _ in TABLE_FIGURES}


class Metrics:
    """One store's metrics; ``serve`` starts the HTTP endpoint."""

    def __init__(self, store: str, conf=None, kafka=None) -> None:
        self.store = store
        self.conf = conf
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
        self._figures = None
        if conf is not None:  # figures read from the tables in the background
            self._figures = TableFigures(conf, kafka=kafka)
            self.registry.register(self._figures)

    def serve(self, port: int, address: str | None = None) -> None:
        """Serve ``/metrics`` on ``port`` (a daemon thread; ``close`` stops it), at
        ``address``: by default the profile's ``metrics.address``, so the stream, which
        passes only the port, listens where the profile says."""
        if address is None:
            address = (self.conf.metrics if self.conf is not None else MetricsConfig()).address
        self._server = start_http_server(port, addr=address, registry=self.registry)
        log.info("metrics for store %s on http://%s:%s/metrics", self.store, address, port)

    def close(self) -> None:
        if self._figures is not None:
            self._figures.stop()
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
        self.sweep_lateness(result)

    def sweep_lateness(self, result) -> None:
        """A sweep's lateness, when it was measured (``eviction.measure_lateness``, which
        the stream runs after its batch)."""
        median = (result.lateness_ms or {}).get("p50")
        if median is not None:
            self.lateness.labels(self.store, result.clock).observe(max(0.0, median / 1000))
