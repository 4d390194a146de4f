"""Assembly: a store's runtime built from its profile.

``App`` is the one place that turns a configuration into working parts (Kafka clients, the
Spark session, the store, the lease, the changelog publisher) and holds the one rule for
standalone operations (``App.guard``): a sweep, TTL change, restore into the store, upgrade
or scheduled job takes the store's lease for its write, and while another process (the
stream) holds it, changes nothing and says so. Every entry point (the ``ttl`` command line,
the ``jobs/`` scripts) is one call into ``ttl.commands`` on an ``App``, so a job on a
laptop and on a cluster differ only by their profile.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator
from pathlib import Path

from ttl import config, delta_log, single_writer
from ttl.changelog import topic
from ttl.changelog.progress import published_progress
from ttl.changelog.publisher import Publisher
from ttl.clock import Clock
from ttl.config import Config, declared_settings
from ttl.errors import ConfigError, LeaseLost, ProgressUnreadable, StoreMissing
from ttl.jvm import jars
from ttl.kafka import KafkaClients
from ttl.lease import Lease
from ttl.local.kafka import LocalKafka
from ttl.names import EMBEDDED, PROP_RESEED_REQUIRED, local_path, progress_topic
from ttl.spark import get_session
from ttl.store import DeltaStore

log = logging.getLogger(__name__)

SKIPPED = "skipped: the stream owns the table (lease held by {holder})"


class App:
    """One store's parts, built on first use from its profile."""

    def __init__(self, conf: Config, *, bootstrap: str | None = None, spark=None,
                 wall_clock: Clock | None = None) -> None:
        self.conf = conf
        self.kafka = KafkaClients(conf.kafka, bootstrap or conf.kafka.bootstrap_servers)
        self.wall_clock = wall_clock
        self._spark = spark
        self._stores: dict[bool, object] = {}
        self._guard_lease: Lease | None = None
        self._session_checked = False
        self._kafka_checked = False
        self.lease_lost = threading.Event()  # the guard's lease was lost while held
        # Under the command line the main thread is interrupted when the lease is lost,
        # so the operation stops before its next write (a commit under way is atomic).
        self.interrupt_on_lease_loss = False

    @classmethod
    def load(cls, path: str | Path, *, bootstrap: str | None = None) -> App:
        return cls(config.load(path), bootstrap=bootstrap)

    @property
    def spark(self):
        if self._spark is None:
            self._refuse_a_second_writer()  # on the profile's settings
            self._spark = get_session(self.conf.spark)
        if not self._session_checked:
            self._refuse_a_second_writer()  # on the session's
            self._session_checked = True
        return self._spark

    def _refuse_a_second_writer(self, *also: tuple[str, str]) -> None:
        """Refuse a profile whose tables sit where Delta could let a second driver commit
        beside this one, or where Spark and ttl's Spark-free reads would not find the same
        table (``ttl.single_writer``): every command that opens the store or starts Spark,
        the reading ones too, since the remedy is one setting in the profile. Before Spark
        starts, on the profile's settings (seconds, not minutes); once a session runs, on
        its own, which are what Delta goes by and may differ (``spark-submit --conf``,
        ``core-site.xml``, a session already running when the profile's were given).
        ``also``: other tables the command writes (``single_writer.problem``)."""
        if self._spark is None:
            settings, default_fs = declared_settings(self.conf.spark), None
        else:
            settings, default_fs = single_writer.session_view(self._spark)
        unsafe = single_writer.problem(self.conf, settings, default_fs=default_fs, also=also)
        if unsafe is not None:
            raise ConfigError(unsafe)

    def refuse_an_unsafe_target(self, setting: str, location: str) -> None:
        """``_refuse_a_second_writer`` for one more table a command writes (a restore's
        target): on the profile's settings before Spark starts, if it has not, then on the
        running session's (starting it: the command needs it next anyway)."""
        started = self._spark is not None
        self._refuse_a_second_writer((setting, location))
        if not started:
            self.spark  # noqa: B018 - starts the session, whose settings are checked next
            self._refuse_a_second_writer((setting, location))

    def store(self, *, check_ttl: bool = True, create: bool = False):
        """The store (``check_ttl=False``: opened under the table's own TTL, for ``alter``).

        Its table is created only with ``create`` (``ttl run``), and then only while the
        changelog has no progress (a new store): a missing table under a changelog that
        has some was lost, and an empty one in its place would stand for the store. Every
        other command refuses a missing table (``StoreMissing``, naming the action);
        ``ttl restore`` makes its table itself."""
        if check_ttl not in self._stores:
            self._refuse_a_second_writer()  # a setting to change, before the brokers
            # Kafka first: an unreachable broker fails in seconds, before Spark starts.
            progress, unreadable = self._changelog_progress()
            if not delta_log.is_delta_table(self.spark, self.conf.store.path):
                self._refuse_a_new_table(create, progress, unreadable)
            store = DeltaStore(self.spark, self.conf.store, clock=self.conf.eviction.clock,
                               wall_clock=self.wall_clock, check_ttl=check_ttl, create=create)
            if store.properties.get(PROP_RESEED_REQUIRED) != "true":  # else: another timeline
                store.stream_time.advance(progress.stream_time if progress else None)
            store.lease = self._guard_lease  # writes check the lease ``guard`` took
            self._stores[check_ttl] = store
        return self._stores[check_ttl]

    def _refuse_a_new_table(self, create: bool, progress, unreadable: Exception | None) -> None:
        """Raise ``StoreMissing`` unless a new table may be created at the store's path."""

        where = f"store {self.conf.store.name}: there is no store table at {self.conf.store.path}"
        if not create:
            raise StoreMissing(where)
        if unreadable is not None:
            raise StoreMissing(f"{where}, and the changelog's progress could not be read "
                               f"({unreadable}), so whether the store had a table (and lost "
                               "it) is unknown; nothing was created")
        if progress is not None and progress.highest >= 0:
            raise StoreMissing(
                f"{where}, but its changelog {self.conf.kafka.changelog_topic} holds versions "
                f"up to {progress.highest}: the table was lost or moved, and a new empty one "
                "would stand for it; nothing was created. Operator action: rebuild it with "
                "`ttl restore --conf PROFILE` (or fix store.path)")

    def _changelog_progress(self):
        """The changelog's progress (``None``: no progress topic, or brokers this command
        cannot reach) and, when it could not be read, why.

        Its stream time is what the store's is raised to: the table's log recovers it only
        from commits it still holds, and its retention drops old ones. Every version is
        either published (the progress's stream time covers it) or not yet (then its commit
        is still in the log: the publisher needs it), so the two together never lose
        stream time."""

        if not self.kafka_reachable:
            return None, None
        self.check_kafka()
        try:
            return published_progress(self.kafka, progress_topic(
                self.conf.kafka.changelog_topic)), None
        except ProgressUnreadable as exc:
            log.warning("stream time from the table's log only: %s", exc)
            return None, exc

    def lease(self, **kwargs) -> Lease:
        return Lease(self.spark, self.conf.store.path, **kwargs)

    def guard(self) -> str | None:
        """Claim the store for a standalone write: take its lease (renewed by heartbeat until
        ``release``) and return ``None``, or return the line to print when another process
        (the stream) holds a live lease. Taking, not only checking, the lease means a stream
        that starts meanwhile waits for this write instead of racing it (and the publisher
        this write may create cannot fence a live stream's)."""
        if self._guard_lease is None:  # one per App: the daemon asks at every tick
            self._guard_lease = self.lease(duration_ms=self.conf.eviction.lease)
        # Waits one lease duration when the lease looks lapsed (a crashed stream's): only a
        # row seen unchanged that long is taken over (``ttl.lease``).
        if self._guard_lease.acquire(wait=True):
            for store in self._stores.values():
                store.lease = self._guard_lease
            self.lease_lost.clear()
            self._guard_lease.start_heartbeat(on_lost=self._lost_the_lease)
            return None
        other = self._guard_lease.held_by_other()
        return SKIPPED.format(holder=other.holder if other else "another writer")

    def _lost_the_lease(self) -> None:
        import _thread

        self.lease_lost.set()
        log.error("store %s: the lease was lost while a standalone operation ran; stopping "
                  "it before its next write", self.conf.store.name)
        if self.interrupt_on_lease_loss:
            if self._spark is not None:  # a write's Spark job under way fails: no commit
                self._spark.sparkContext.cancelAllJobs()
            _thread.interrupt_main()

    def check_lease(self) -> None:
        """Raise ``LeaseLost`` if the lease ``guard`` took was lost meanwhile."""

        if self.lease_lost.is_set():
            raise LeaseLost(f"store {self.conf.store.name}: the lease on "
                            f"{self.conf.store.path} was lost while the operation ran")

    def release(self) -> None:
        """Give back a lease ``guard`` took (no-op otherwise)."""
        if self._guard_lease is not None:
            self._guard_lease.release()

    @contextlib.contextmanager
    def claimed(self, needed: bool = True) -> Iterator[str | None]:
        """``guard`` for one standalone command: yields ``None`` (the lease is held until
        the block ends) or the skip line; with ``needed`` false (a dry run, a scratch
        target) takes nothing and yields ``None``."""
        skipped = self.guard() if needed else None
        try:
            yield skipped
        except KeyboardInterrupt:
            if needed and skipped is None:
                self.check_lease()  # the interrupt was the lost lease: say so
            raise
        finally:
            for store in self._stores.values():
                store.quiesce()  # a checkpoint its commit started, before the command ends
            if needed and skipped is None:
                self.release()
        if needed and skipped is None:
            self.check_lease()  # a loss after the last write still fails the operation

    def check_kafka(self) -> None:
        """Refuse wrong credentials or unreachable brokers before Spark starts: seconds,
        not minutes. Once per App (a command and the store it opens both ask)."""
        if not self._kafka_checked:
            self.kafka.check_access(self.conf.source)
            self._kafka_checked = True

    @property
    def kafka_reachable(self) -> bool:
        """The embedded broker runs only inside ``ttl run``; other commands cannot reach it."""
        return self.kafka.bootstrap != EMBEDDED

    def publisher(self, store=None):
        """Check the changelog topics (refusing a bad one), then start the fenced publisher
        (of ``store``, default the checked store)."""

        store = store or self.store()
        limit = self.conf.store.max_record_bytes
        topic.prepare_for_store(store.spark, store.path, store.properties, self.kafka, limit)
        return Publisher(store.spark, store.path, self.conf.store.name, self.kafka,
                         self.conf.changelog, max_record_bytes=limit)

    def publish_now(self, store=None) -> str:
        """Publish the changelog up to the table's version, when the brokers are reachable."""
        if not self.kafka_reachable:
            return "changelog: not published now (embedded broker); the next `ttl run` publishes it"
        publisher = self.publisher(store)
        try:
            result = publisher.publish()
        finally:
            publisher.close()
        return (f"changelog: published {result.records} records up to version "
                f"{result.published_version}")


@contextlib.contextmanager
def with_kafka(conf: Config, data_dir: Path | None = None) -> Iterator[App]:
    """An ``App`` whose brokers are up: the configured ones, or the embedded local broker
    (started here, stopped on exit: the only place the product starts local tooling)."""
    if not conf.kafka.embedded:
        yield App(conf)
        return

    with LocalKafka(Path(data_dir) / "kafka" if data_dir else embedded_kafka_dir(conf)) \
            as broker:
        yield App(conf, bootstrap=broker.bootstrap_servers)


def embedded_kafka_dir(conf: Config) -> Path:
    """Where the embedded broker keeps its topics from run to run: beside a store on the
    local file system; for a store elsewhere (``s3a://...``), under ttl's cache, by store
    name (a URI is no local directory: taken for one, it made ``s3a:/`` in the working
    directory)."""
    local = local_path(conf.store.path)
    if local is not None:
        return Path(local).parent / "kafka"
    return jars.cache_root() / "kafka" / conf.store.name
