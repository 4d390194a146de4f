"""The publisher: the table's changes onto the changelog, in Delta commit order (docs/semantics.md).

Design, and why it keeps "replaying the changelog rebuilds the table":

* **Source of truth is the Delta log.** The publisher reads the Change Data Feed version by
  version, whoever wrote the version (the stream, a sweep job, an operator's DELETE), and
  publishes each key once per version as its final state there: a put if the version ends
  with the key present (an ``insert`` or ``update_postimage`` row), else a tombstone. A
  version that deletes and re-inserts a key (overwrite, restore) therefore publishes the put.
  The one exception, ``publish_known``: the stream's batch version, published from the rows
  the batch wrote when they provably are that version's change feed (one row per key, the
  final state), which saves reading it back.
* **Expiry is told from commit metadata**: a sweep's commit says ``op=sweep`` and its clock;
  a batch lists the keys it removed as expired on arrival. Anything else is a delete.
* **One transaction per group of whole versions**, with the progress record (last version,
  stream time, input offsets) in the same transaction on the ``-progress`` topic. Readers use
  ``read_committed``: a crash mid-version leaves an aborted transaction nobody sees, and the
  restarted publisher resumes after the last committed progress. So nothing is skipped,
  reordered, or (for committed readers) even repeated.
* **Fencing**: the transactional id is fixed per store (``ttl-<store>-changelog``);
  ``init_transactions`` fences any older publisher (a zombie after a restart, a standalone
  job), whose next commit fails.
* **Partitioning**: librdkafka's ``murmur2_random`` partitioner, the Java client's murmur2
  for non-null keys, so a key lands where any Java producer would put it.
* **From the executors** (``changelog.publish_from``): the same versions, each changelog
  partition by its own transactional producer on the executors
  (``ttl.changelog.partitioned``), then this producer's progress record. One way per
  publisher, for every version it publishes: a partition's records then come from one
  transactional id at a time, which is what fencing needs. A publisher from the driver
  that finds partition progress records first fences every partition's producer once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial

from confluent_kafka import KafkaError, KafkaException

from ttl import delta_log
from ttl.arrow import arrow_batches
from ttl.changelog import continuity, partitioned
from ttl.changelog import format as fmt
from ttl.changelog.partitioning import partition_of
from ttl.changelog.progress import PROGRESS_KEY, Progress, read_progress
from ttl.changelog.reader import convert, end_offsets, latest_per_key, read_topic
from ttl.clock import Clock, WallClock
from ttl.config import ChangelogConfig
from ttl.errors import (
    ChangeFeedGone,
    ChangelogMismatch,
    ConfigError,
    PublisherFenced,
    ReseedRequired,
)
from ttl.kafka import KafkaClients
from ttl.names import (
    OP_SWEEP,
    PROP_RESEED_REQUIRED,
    PROP_VERSION_OFFSET,
    partition_transactional_id,
    progress_topic,
    publisher_transactional_id,
)
from ttl.store.layout import set_properties
from ttl.store.write import expired_keys

log = logging.getLogger(__name__)

_PRESENT = ("insert", "update_postimage")


@dataclass
class PublishResult:
    """What one publication did; ``published_version`` and ``table_version`` are changelog
    versions (the table's Delta versions plus its version offset)."""

    versions: int = 0
    records: int = 0
    puts: int = 0
    tombstones: int = 0
    published_version: int = -1
    table_version: int = -1
    seconds: float = 0.0
    #: Where its records were produced: ``driver``, ``executors`` (``partitioned``), or
    #: ``none`` (nothing published); one publisher publishes one way (``both`` only if
    #: that ever changed within one result).
    published_from: str = "none"

    def add_from(self, where: str) -> None:
        if self.published_from in ("none", where):
            self.published_from = where
        else:
            self.published_from = "both"

    @property
    def lag_versions(self) -> int:
        return max(0, self.table_version - self.published_version)


def table_at_path(spark, path: str) -> continuity.TableAtPath:
    """What the continuity rule needs of the table at ``path`` (one look at its log)."""
    newest, table_id = delta_log.position(spark, path)
    return continuity.table_at_path(path, table_id, newest, delta_log.properties(spark, path))


class Publisher:
    """Publishes a store's table changes; one live instance per store (fenced)."""

    def __init__(self, spark, table_path: str, store_name: str, kafka: KafkaClients,
                 changelog: ChangelogConfig, *, clock: Clock | None = None,
                 max_record_bytes: int = 1_000_000) -> None:
        self.spark = spark
        self.kafka = kafka
        self.path = table_path
        self.store = store_name
        self.topic = kafka.conf.changelog_topic
        self.progress_topic = progress_topic(self.topic)
        self.conf = changelog
        self.clock = clock or WallClock()
        self.settings = partitioned.producer_settings(changelog.transaction_timeout,
                                                      max_record_bytes)
        self.producer = kafka.producer(**{
            "transactional.id": publisher_transactional_id(store_name), **self.settings})
        self.fenced = False  # a newer publisher of this store took over: this one is done
        self.from_executors = publishes_from_executors(changelog, spark)
        # The changelog's partition count, asked once: a changed count is refused at start
        # (``ttl.changelog.topic``), and every key's partition is computed from it.
        self.partitions = len(self.producer.list_topics(self.topic, timeout=30)
                              .topics[self.topic].partitions)
        self.progress = read_progress(kafka, self.progress_topic,
                                      tail=partitioned.progress_tail(self.partitions))
        # Changelog version = Delta version + offset (``fmt.version_offset``); the progress
        # and every ``PublishResult`` speak changelog versions.
        self._read_table()
        # Checked before ``init_transactions``: a refused publisher fences nobody.
        why = continuity.refusal(self.table, self._published_so_far())
        if why is not None:
            self.producer = None
            raise ChangelogMismatch(why)
        self.producer.init_transactions(60)  # fences any older publisher of this store
        if self.progress.partitioned and not self.from_executors:
            self._fence_partitions()  # an earlier run's producers on the executors
        log.info("publisher for %s resumes after version %s", store_name, self.progress.version)

    def _fence_partitions(self) -> None:
        """Fence every changelog partition's producer (``partitioned``), as the
        executors' publication of an earlier run (a zombie, say) may still hold one: this
        publisher's records of a partition must not be followed by an older one's."""
        for partition in range(self.partitions):
            fence = self.kafka.producer(**{
                "transactional.id": partition_transactional_id(self.store, partition)})
            fence.init_transactions(60)

    def _read_table(self) -> None:
        """The table's id, newest version and marks, as they are now."""
        self.table = table_at_path(self.spark, self.path)
        self.offset = self.table.offset
        self.reseed_required = self.table.reseed_required
        self.table_id = self.table.table_id

    def _published_so_far(self) -> continuity.PublishedSoFar:
        return continuity.PublishedSoFar(self.topic, self.progress.highest,
                                         self.progress.table_id)

    def reset_progress(self, version: int, stream_time: int | None, input_offsets: dict) -> None:
        """Mark the table's (Delta) ``version`` as published (after a restore: its state is
        already on the topic); the restore may have set a new version offset."""
        self._read_table()
        self.progress = Progress(version + self.offset, stream_time, dict(input_offsets),
                                 self.table_id)
        self.producer.begin_transaction()
        self._commit()

    def close(self) -> None:
        """Flush, then destroy the producer: a producer left alive keeps reconnecting (and
        logging) after its brokers stopped.

        A fenced producer is only dropped (destroyed with its last reference): flushing it
        and the abort ``close()`` tries both fail on it, and only say so in a
        ``RuntimeWarning``."""
        if self.producer is None:
            return
        if not self.fenced:
            self.producer.flush(30)
            self.producer.close()
        self.producer = None

    def table_version(self) -> int:
        """The table's newest Delta version; ``ChangelogMismatch`` when the table is no
        longer the one this publisher was made for (removed or created again meanwhile:
        its versions would start below the progress and never be published)."""
        version, table_id = delta_log.position(self.spark, self.path)
        self._check_table(version, table_id)
        return version

    def _table_state(self) -> tuple[int, dict[str, str]]:
        """``table_version`` and the properties of that same version (one snapshot: a
        property read after the version may speak of commits past it)."""
        version, table_id, props = delta_log.identity(self.spark, self.path)
        self._check_table(version, table_id)
        return version, props

    def _check_table(self, version: int, table_id: str) -> None:
        if version < 0 or table_id != self.table_id:
            what = "removed" if version < 0 else f"replaced (Delta table id {table_id})"
            raise ChangelogMismatch(
                f"the table at {self.path} (Delta table id {self.table_id}) was {what} while "
                f"its publisher ran: nothing more of it is published. Operator action: "
                f"{continuity.RESTORE_ACTION}")

    def publish(self, until: int | None = None) -> PublishResult:
        """Publish every version after the last published one, up to the table's (Delta)
        version ``until`` (or now)."""
        started = time.monotonic()
        result = PublishResult(published_version=self.progress.version)
        latest = self.table_version() if until is None else until
        if self.reseed_required and latest + self.offset > self.progress.version:
            raise ReseedRequired(f"{self.path} was restored from a point in time or another "
                                 f"topic ({PROP_RESEED_REQUIRED}); its versions cannot be "
                                 f"published onto {self.topic} one by one")
        result.table_version = latest + self.offset
        start = max(0, self.progress.version - self.offset + 1)  # Delta versions from here
        while start <= latest:
            end = min(latest, start + 99)
            if self.from_executors:
                self._publish_range(start, end, result, rows=self._change_rows(start, end))
            else:
                self._publish_range(start, end, result)
            start = end + 1
        result.published_version = self.progress.version
        result.seconds = time.monotonic() - started
        if result.versions:
            log.info("published versions up to %s: %s records (%s puts, %s tombstones) in "
                     "%.1f s, lag %s versions", result.published_version, result.records,
                     result.puts, result.tombstones, result.seconds, result.lag_versions)
        return result

    def publish_known(self, version: int, changes, until: int | None = None) -> PublishResult:
        """Publish ``version`` from the changes its writer already holds, without reading the
        change data feed back, then anything after it (from the feed).

        Only exact when ``version`` is the next one to publish and its writer made exactly
        this one commit from those changes (the stream's batch write, whichever it made:
        one row per changed key, final state); otherwise this is ``publish()``.
        ``changes`` has ``kind`` (upsert/delete), ``key``, ``value``, ``ts``, ``headers``,
        ``record_ttl``: an Arrow table in the driver, or rows the executors hold
        (``.frame``, with each removal's ``removal_op``). A publisher from the executors
        publishes the latter there, and reads the feed there rather than take the former;
        one from the driver takes only the former. ``until`` bounds what follows, as in
        ``publish``.
        """
        held = getattr(changes, "frame", None)
        if self.progress.version != version + self.offset - 1 or (
                (held is not None) != self.from_executors):
            return self.publish(until)
        started = time.monotonic()
        result = PublishResult(published_version=self.progress.version,
                               table_version=version + self.offset)
        if held is not None:
            self._publish_range(version, version, result, rows=_known_rows(held),
                                rows_version=version)
        else:
            self._publish_range(version, version, result, runs=_known_runs(version, changes))
        rest = self.publish(until)
        result.versions += rest.versions
        result.records += rest.records
        result.puts += rest.puts
        result.tombstones += rest.tombstones
        result.published_version = rest.published_version
        result.table_version = rest.table_version
        if rest.versions:
            result.add_from(rest.published_from)
        result.seconds = time.monotonic() - started
        return result

    def _change_rows(self, start: int, end: int):
        """Per (version, key) the row that says how the key ends in that version (a
        DataFrame: ``_commit_version``, ``key``, the record's columns, ``present``)."""
        from pyspark.sql import functions as F

        cdf = (self.spark.read.format("delta").option("readChangeFeed", "true")
               .option("startingVersion", start).option("endingVersion", end).load(self.path)
               .where("_change_type != 'update_preimage'"))
        present = F.col("_change_type").isin(*_PRESENT).cast("int")
        return (cdf.groupBy("_commit_version", "key")
                .agg(F.max_by(F.struct("value", "ts", "headers", "record_ttl",
                                       present.alias("present")), present).alias("r"))
                .select("_commit_version", "key", "r.*"))

    def _changes(self, start: int, end: int) -> Iterator[tuple]:
        """``_change_rows`` in version order, read in Arrow batches (``_version_runs``)."""
        return _version_runs(self._change_rows(start, end).orderBy("_commit_version"))

    def _publish_range(self, start: int, end: int, result: PublishResult,
                       runs: Iterator | None = None, rows=None,
                       rows_version: int | None = None) -> None:
        """Versions ``start..end``: from ``runs`` (or the change feed) through this
        producer, or, given ``rows`` (a DataFrame of ``_change_rows``' columns, but for
        ``_commit_version`` when ``rows_version`` says which one version they are: a batch's
        held rows), from the executors (``_publish_on_executors``)."""
        committed = self.progress.copy()
        try:
            if rows is not None:
                self._publish_on_executors(start, end, result, rows, rows_version)
            else:
                self._publish_versions(start, end, result, runs)
        except PublisherFenced:
            self.progress = committed  # at commit time: the transaction was not committed
            raise
        except KafkaException as exc:
            if self._fenced_by(exc):
                self.progress = committed
                raise self._fenced_error(exc) from exc
            self._abort(committed)
            raise
        except Exception as exc:
            self._abort(committed)
            if _change_data_gone(exc):
                raise ChangeFeedGone(
                    f"the change data of versions {start}..{end} of {self.path} is gone "
                    f"before the publisher read it (last published changelog version "
                    f"{committed.version}): {_first_line(exc)}") from exc
            if "No module named 'confluent_kafka'" in str(exc):
                raise ConfigError(
                    "publication from the executors needs confluent-kafka in the executors' "
                    "Python: install it there, or set changelog.publish_from = \"driver\"") \
                    from exc
            raise

    def _publish_on_executors(self, start: int, end: int, result: PublishResult,
                              rows, rows_version: int | None = None) -> None:
        """Versions ``start..end`` from ``rows``, each changelog partition by its own
        producer on the executors (``ttl.changelog.partitioned``), then this producer's
        progress record: the version, with the stream time and input position."""
        from pyspark.sql.types import IntegerType, LongType, StructField, StructType

        metadata = delta_log.engine_metadata(self.spark, self.path, start, end)
        versions = {}
        for version in range(start, end + 1):
            meta = metadata.get(version, {})
            self._carry(meta)
            versions[version] = self._facts(meta, known="removal_op" in rows.columns)
        count = self.partitions
        job = partitioned.Job(
            client=self.kafka.client_config(), producer=self.settings, topic=self.topic,
            progress_topic=self.progress_topic, store=self.store, partitions=count,
            offset=self.offset, end=end, versions=versions,
            max_records_per_transaction=self.conf.max_records_per_transaction,
            commit_timeout_s=self.conf.transaction_timeout / 1000, now_ms=self.clock.now_ms())
        # A batch's held rows get their version from the first task (``with_partition``).
        keyed = StructType([*([StructField(partitioned.VERSION, LongType(), False)]
                              if rows_version is not None else []),
                            *rows.schema.fields,
                            StructField(partitioned.PARTITION, IntegerType(), False)])
        tasks = max(1, min(count, self.spark.sparkContext.defaultParallelism))
        # Sorted: a task publishes each partition's rows at once (they must be contiguous:
        # a partition met twice would find its first share's progress and skip the rest),
        # in version order.
        done = (rows.mapInArrow(partial(partitioned.with_partition, partitions=count,
                                        version=rows_version), keyed)
                .repartition(tasks, partitioned.PARTITION)
                .sortWithinPartitions(partitioned.PARTITION, partitioned.VERSION)
                .mapInArrow(partial(partitioned.publish_partitions, job=job),
                            partitioned.RESULT_DDL)
                .collect())
        for row in done:
            result.records += row.records
            result.puts += row.puts
            result.tombstones += row.tombstones
        result.versions += end - start + 1
        result.add_from("executors")
        self.progress.version = end + self.offset
        self.producer.begin_transaction()
        self._commit()

    def _facts(self, meta: dict, known: bool) -> partitioned.VersionFacts:
        """What a version's records carry besides its rows, from its commit's metadata
        (``_removal``'s rules): a batch's own change rows (``known``) say which of their
        removals are expiries."""
        if meta.get("op") == OP_SWEEP:
            return partitioned.VersionFacts(self.progress.stream_time, sweep=True,
                                            clock=meta.get("clock"))
        expired = frozenset()
        if meta.get("expired_keys") and not known:
            expired = frozenset(expired_keys(self.spark, self.path, meta))
        return partitioned.VersionFacts(self.progress.stream_time, clock=_batch_clock(meta),
                                        expired=expired)

    def reseed(self) -> PublishResult:
        """Publish the table's current state as one snapshot version and continue after it:
        the way on when the change data of unpublished versions is gone (``ChangeFeedGone``).

        A put per entry of the latest version, and a tombstone per key whose last record on
        the changelog is a put but which the table no longer has (deleted or expired in the
        versions that cannot be read), so replaying the changelog still rebuilds the table.
        The versions in between are not published one by one; the progress carries the
        table's stream time and input position. Exact only while nothing else writes (the
        caller holds the store's lease).
        """
        from pyspark.sql import functions as F


        started = time.monotonic()
        latest, props = self._table_state()
        if latest + self.offset <= self.progress.version:
            # A table whose versions are below the changelog's (a restored one whose old
            # table published on): the snapshot must come after everything published. The
            # offset's own (metadata) commit is the snapshot's version.
            self.offset = continuity.reseed_offset(latest + 1, self.offset,
                                                   self.progress.version)
            set_properties(self.spark, self.path, {PROP_VERSION_OFFSET: str(self.offset)})
            latest, props = self._table_state()
        table = (self.spark.read.format("delta").option("versionAsOf", latest)
                 .load(self.path))
        on_topic = latest_per_key(convert(read_topic(
            self.spark, self.kafka, self.topic, end_offsets(self.kafka, self.topic)), "engine"))
        gone = on_topic.select("key").join(table.select("key"), "key", "left_anti")
        record = ("value", "ts", "headers", "record_ttl")
        puts = table.select("key", F.struct(*record, F.lit(1).alias("present")).alias("r"))
        tombstones = gone.select("key", F.struct(
            *(F.lit(None).cast(table.schema[c].dataType).alias(c) for c in record),
            F.lit(0).alias("present")).alias("r"))
        rows = (puts.unionByName(tombstones)
                .select(F.lit(latest).cast("bigint").alias("_commit_version"), "key", "r.*"))
        committed = self.progress.copy()
        result = PublishResult(published_version=self.progress.version,
                               table_version=latest + self.offset)
        try:
            # Position and stream time from the snapshot published, not the newest one: a
            # floor raised since would cover commits past it.
            position = delta_log.recorded_position(self.spark, self.path, props, latest)
            self._carry({"stream_time": delta_log.stream_time(self.spark, self.path, props,
                                                              latest)})
            # The position this table holds, not one merged with the progress's: after a
            # restore from a point in time the progress's position is the old table's,
            # past what this one holds (none recorded: the position is unknown).
            self.progress.input_offsets = dict(position.position)
            if self.from_executors:
                self._publish_range(latest, latest, result, rows=rows)
            else:
                self._publish_range(latest, latest, result, runs=_version_runs(rows))
        except BaseException:
            self.progress = committed
            raise
        result.published_version = self.progress.version
        if self.reseed_required:  # done: the table's changes continue the changelog now
            set_properties(self.spark, self.path, {PROP_RESEED_REQUIRED: "false"})
            self.reseed_required = False
        result.seconds = time.monotonic() - started
        log.warning("re-seeded the changelog %s with the state of %s at version %s: %s puts, "
                    "%s tombstones in %.1f s", self.topic, self.path, latest, result.puts,
                    result.tombstones, result.seconds)
        return result

    def _abort(self, committed: Progress) -> None:
        """Leave nothing half-done: abort the open transaction, forget uncommitted progress."""
        self.progress = committed
        try:
            self.producer.abort_transaction(30)
        except KafkaException as exc:
            if self._fenced_by(exc):  # a fatal error here too: ``close()`` then only drops it
                pass
            elif exc.args and isinstance(exc.args[0], KafkaError) and \
                    exc.args[0].code() == KafkaError._STATE:
                return  # none was open (publication from the executors failed before it)
            log.warning("could not abort the changelog transaction", exc_info=True)

    def _publish_versions(self, start: int, end: int, result: PublishResult,
                          runs: Iterator | None = None) -> None:
        metadata = delta_log.engine_metadata(self.spark, self.path, start, end)
        runs = self._changes(start, end) if runs is None else runs
        try:
            self._publish_runs(start, end, result, runs, metadata)
        finally:  # a failure midway ends the change feed's serving job too
            close = getattr(runs, "close", None)
            if close is not None:
                close()

    def _publish_runs(self, start: int, end: int, result: PublishResult, runs: Iterator,
                      metadata: dict[int, dict]) -> None:
        """Produce ``runs`` (``(version, rows)`` in version order, ``_version_runs``)."""
        pending = next(runs, None)
        in_txn = 0
        # Partitions the executors published past the progress (a crash between their
        # commits and the driver's record): what they hold is not sent to them again.
        ahead = dict(self.progress.ahead)
        count = self.partitions
        self.producer.begin_transaction()
        for version in range(start, end + 1):
            meta = metadata.get(version, {})
            self._carry(meta)
            removal = _removal(meta, lambda meta=meta: expired_keys(self.spark, self.path,
                                                                    meta))
            at = version + self.offset
            while pending is not None and pending[0] == version:
                for key, value, headers in fmt.records(pending[1], at,
                                                       self.progress.stream_time, removal):
                    if ahead and at <= ahead.get(partition_of(key, count), -1):
                        continue
                    self._produce(self.topic, key, value, headers)
                    in_txn += 1
                    result.records += 1
                    if value is None:
                        result.tombstones += 1
                    else:
                        result.puts += 1
                    if in_txn >= self.conf.max_records_per_transaction:
                        # A huge version spans transactions (each must end within the
                        # broker's transaction timeout). Progress only moves at a version's
                        # end, so after a crash the version is republished whole: repeated,
                        # never skipped.
                        self._commit(with_progress=False)
                        in_txn = 0
                        self.producer.begin_transaction()
                pending = next(runs, None)
            result.versions += 1
            result.add_from("driver")
            self.progress.version = version + self.offset
            if in_txn >= self.conf.max_records_per_transaction or version == end:
                self._commit()
                in_txn = 0
                if version != end:
                    self.producer.begin_transaction()

    def _carry(self, meta: dict) -> None:
        if meta.get("stream_time") is not None:
            st = meta["stream_time"]
            self.progress.stream_time = st if self.progress.stream_time is None else max(
                st, self.progress.stream_time)
        if meta.get("input_offsets"):
            # Merged, not replaced: a table written before batches recorded the whole input
            # position has commits naming only the partitions their batch read.
            self.progress.input_offsets = {**self.progress.input_offsets,
                                           **meta["input_offsets"]}

    def _produce(self, topic: str, key: bytes, value: bytes | None, headers: list) -> None:
        partitioned.produce(self.producer, topic, key, value, headers)

    def _commit(self, with_progress: bool = True) -> None:
        if with_progress:
            self.progress.table_id = self.table_id  # published from this table from now on
            self.progress.ahead = {p: v for p, v in self.progress.ahead.items()
                                   if v > self.progress.version}
            self._produce(self.progress_topic, PROGRESS_KEY,
                          self.progress.to_json(self.store, self.clock.now_ms()), [])
        try:
            self.producer.commit_transaction(self.conf.transaction_timeout / 1000)
        except KafkaException as exc:
            if self._fenced_by(exc):
                raise self._fenced_error(exc) from exc
            raise

    def _fenced_by(self, exc: KafkaException) -> bool:
        """A fatal error: a newer instance with our transactional id fenced this one (it
        can surface at produce, add-partitions or commit time); marks it ``fenced``."""
        if fatal_error(exc):
            self.fenced = True
        return self.fenced

    def _fenced_error(self, exc: KafkaException) -> PublisherFenced:
        # Fenced, as a rule; any other fatal producer error (say, an authorization failure
        # of the transactional id) ends the publisher the same way, and librdkafka's log
        # line on stderr names it.
        return PublisherFenced(f"publisher of {self.store} was fenced or its producer hit "
                               f"another fatal error: {exc}")


def publishes_from_executors(changelog: ChangelogConfig, spark) -> bool:
    """``changelog.publish_from``, for a publisher in ``spark``'s session: ``auto`` is the
    executors on a cluster master (not ``local``), else the driver."""
    if changelog.publish_from != "auto":
        return changelog.publish_from == "executors"
    return not spark.sparkContext.master.startswith("local")


def fatal_error(exc: KafkaException) -> bool:
    """Whether ``exc`` says the producer can do nothing more: an error flagged fatal (the
    transaction's add-partitions or commit answered that a newer instance fenced this one),
    or ``produce()``'s own ``_FATAL`` ("Unable to produce message: Local: Fatal error"), which
    it raises once the background thread has hit such an error first, and which is not
    flagged fatal itself."""
    err = exc.args[0] if exc.args else None
    if not isinstance(err, KafkaError):
        return False
    return err.fatal() or err.code() in (KafkaError._FATAL, KafkaError._FENCED)


#: What Delta says when a version's change data (or its commit) is gone.
_GONE_MARKERS = ("DELTA_CHANGE_DATA_FILE_NOT_FOUND", "DELTA_MISSING_CHANGE_DATA",
                 "DELTA_VERSIONS_NOT_CONTIGUOUS", "VersionNotFoundException",
                 "DELTA_FILE_NOT_FOUND_DETAILED")


def _change_data_gone(exc: BaseException) -> bool:
    """A read of the change feed failed because its files or commits are gone (not, say,
    because the whole table or its log is missing: a re-seed would not help there)."""
    text = str(exc)
    if any(marker in text for marker in _GONE_MARKERS):
        return True
    return "FileNotFoundException" in text and (".parquet" in text or "_change_data" in text)


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0][:300] if lines else type(exc).__name__


def _version_runs(frame) -> Iterator[tuple[int, object]]:
    """A frame of ``_changes``'s columns, read in Arrow batches in its order, as runs of
    rows of one version each: ``(version, rows)`` (a version may span several runs)."""

    for batch in arrow_batches(frame):
        versions = batch.column("_commit_version").to_pylist()
        first = 0
        for i in range(1, len(versions) + 1):
            if i == len(versions) or versions[i] != versions[first]:
                yield versions[first], batch.slice(first, i - first)
                first = i


def _known_runs(version: int, changes) -> Iterator[tuple[int, object]]:
    """A batch's changes (Arrow: ``kind`` upsert/delete, one row per key) as ``version``'s
    run of ``_changes``'s rows."""
    import pyarrow.compute as pc

    for batch in changes.to_batches(max_chunksize=10_000):
        yield version, batch.append_column("present", pc.equal(batch.column("kind"), "upsert"))


def _known_rows(held):
    """A batch's change rows held on the executors (``kind``, ``removal_op``, the record's
    columns) as rows of ``_change_rows`` but for their version, which the publishing job
    gives them (``partitioned.with_partition``: not as a literal in the plan)."""
    from pyspark.sql import functions as F

    return held.select("key", "value", "ts", "headers", "record_ttl",
                       (F.col("kind") == "upsert").cast("int").alias("present"), "removal_op")


def _removal(meta: dict, expired: Callable[[], list[str]]) -> fmt.Removal:
    """How a version's removed keys are told (docs/semantics.md): a sweep's as expired by its clock,
    the keys a batch lists as expired on arrival (``expired``: read only when a key is
    removed) by the batch's clock, any other as deleted."""
    if meta.get("op") == OP_SWEEP:
        clock = meta.get("clock")
        return lambda key: ("expire", clock)
    clock = _batch_clock(meta)
    listed: set[str] | None = None

    def told(key: bytes):
        nonlocal listed
        if listed is None:
            listed = set(expired()) if meta.get("expired_keys") else set()
        return ("expire", clock) if key.hex() in listed else ("delete", None)

    return told


def _batch_clock(meta: dict) -> str:
    """Which clock expired a batch's records on arrival (for ``both``: the larger one)."""
    clock = meta.get("clock", "wall")
    if clock != "both":
        return clock
    return "wall" if meta.get("t0") == meta.get("wall") else "stream"
