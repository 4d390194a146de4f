"""The streaming job: Kafka in, store, eviction and changelog out (docs/semantics.md).

Per micro-batch (``foreachBatch``, under the store's write lock):

1. read Spark's Kafka rows once, as Arrow (timestamp in ms, headers, partition, offset);
2. apply them to the store in one commit with the idempotent txn id
   ``ttl:<store>:batch:<query id>`` / batch id, so a batch replayed after a crash is not
   applied twice (a new checkpoint gets a new query id, so restarting batch ids cannot
   collide); the commit records the input offsets it consumed and the stream time;
3. run a stream-time sweep when stream time has advanced ``eviction.stream_interval``;
4. publish the changelog up to the newest version (one fenced transactional publisher; the
   batch's own version from the rows it wrote when that is exact, the sweep's tombstones
   after it) in the background: the next batch's Spark work overlaps this Python/Kafka
   work, and waits for it before publishing its own, so versions go out in commit order.
   A crash before the publication loses nothing: publication follows the Delta versions
   (the next start publishes what is not on the changelog), not Spark's checkpoint.

Each batch logs, once published, where its time went (``ttl.phases``), its Spark jobs and
its write's Delta metrics.

Wall-clock sweeps run on the driver's APScheduler, in their own Spark session, serialized
with the batches through the same lock. The job holds the store's lease while it runs.
SIGTERM/SIGINT stop the query (an interrupted batch is abandoned: its commit is atomic and
the batch is replayed on restart), then the scheduler, the final publication and the lease.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from ttl import batch_size, commit, delta_log, eviction, input_position, publication, schedule
from ttl.bars import bar, move_to
from ttl.config import Config
from ttl.errors import (
    CheckpointAhead,
    CheckpointRegressed,
    ConfigError,
    InputLost,
    StreamOwned,
    TtlError,
)
from ttl.kafka import KafkaClients
from ttl.lease import Lease
from ttl.metrics import Metrics
from ttl.names import (
    BATCH_LOGGER,
    OP_INPUT_SKIPPED,
    PROP_INPUT_SKIPPED,
    batch_txn_app_id,
    query_name,
)
from ttl.phases import BatchPhases
from ttl.store.layout import set_properties

log = logging.getLogger(__name__)
batch_log = logging.getLogger(BATCH_LOGGER)


@dataclass
class StreamSummary:
    batches: int = 0
    records: int = 0
    upserted: int = 0
    deleted: int = 0
    rejected: int = 0
    expired_on_arrival: int = 0
    evicted: dict = field(default_factory=lambda: {"wall": 0, "stream": 0})
    published: int = 0

    def line(self) -> str:
        return (f"batches={self.batches} records={self.records} upserted={self.upserted} "
                f"deleted={self.deleted} rejected={self.rejected} "
                f"expired_on_arrival={self.expired_on_arrival} "
                f"evicted_wall={self.evicted['wall']} evicted_stream={self.evicted['stream']} "
                f"changelog_records={self.published}")


#: What ``take_lease`` allows beyond the lease durations it watches for: its Delta reads.
TAKE_LEASE_SLACK_S = 60


def take_lease(lease: Lease, store_name: str, lease_ms: int) -> None:
    """Take the store's lease; a crashed predecessor's lease lapses within one lease period,
    so wait that long (plus slack) before giving up with ``StreamOwned``, which a holder
    seen renewing its lease gets after one lease duration."""
    if lease.held():  # taken a moment ago (``ttl run`` takes it before the stream starts)
        return
    # A lapse is seen by watching the row unchanged for a lease duration (``ttl.lease``),
    # after a first look that is itself a Delta read: on a loaded machine each can take
    # seconds, so the wait allows for them. A holder seen renewing is alive: named once we
    # have watched for a lease duration (a holder shutting down cleanly releases it by then).
    started = time.monotonic()
    deadline = started + 3 * lease_ms / 1000 + TAKE_LEASE_SLACK_S
    while not lease.acquire():
        other = lease.held_by_other()
        alive = lease.seen_alive and time.monotonic() - started >= lease_ms / 1000
        if alive or time.monotonic() > deadline:
            raise StreamOwned(f"store {store_name} is owned by "
                              f"{other.holder if other else 'another writer'}")
        log.info("waiting for the lease held by %s to lapse",
                 other.holder if other else "another writer")
        time.sleep(1)


class StreamJob:
    """One store's streaming query and everything that runs beside it."""

    def __init__(self, conf: Config, spark, store, kafka: KafkaClients, publisher,
                 lease: Lease) -> None:
        self.conf = conf
        self.spark = spark
        self.store = store
        self.kafka = kafka
        self.publisher = publisher
        self.lock = threading.Lock()
        self.summary = StreamSummary()
        self.lease = lease
        self.sweeper = store.for_thread()  # wall sweeps: own session, same stream time
        self.metrics = Metrics(conf.store.name, conf, kafka)
        self.publication = publication.Publication(
            publisher, on_published=self._published, on_failure=self._publication_failed)
        self.jobs = schedule.StoreJobs(self.sweeper, conf, lock=self.lock,
                                       publish=self.publication.unless_busy,
                                       published=self.publication.table_version,
                                       on_sweep=self.metrics.sweep, warm=True)
        self.jobs.on_fatal = self._job_failed
        self.query = None
        self.query_started = threading.Event()
        self.stopping = threading.Event()
        self.end_offsets: dict[int, int] = {}
        self.input_marks: dict[int, tuple[int, int]] = {}
        #: The records a batch may take (``stream.max_offsets_per_trigger``; ``auto``'s
        #: is set at start from the input's records: ``ttl.batch_size``).
        limit = conf.stream.max_offsets_per_trigger
        self.batch_records: int = batch_size.MAX_RECORDS if limit == "auto" else limit
        #: On a cluster under ``batch_path = "auto"``, the most records a batch folded in
        #: the driver may hold (``None``: no limit known); a larger one goes to the executors.
        self.driver_records: int | None = None
        # The whole input position (every partition ever read, not only the last batch's):
        # what each batch commit records, so a new checkpoint or a restore resumes every
        # partition where it was (a partition absent from the last batch is not re-read).
        self.position: dict[str, int] = {}
        # The (query id, batch id) of the batch that recorded ``position``, if a batch did:
        # the one batch that may be replayed with input below it (a crash between its Delta
        # commit and Spark's checkpoint commit).
        self.last_batch: tuple[str, int] | None = None
        self.position_unknown = False  # the table was restored with no input position
        self.batch_error: BaseException | None = None  # an engine error raised in a batch
        self._last_stream_sweep: int | None = None
        self._measuring = threading.Lock()  # a stream sweep's lateness under way
        self._catch_up_bar = None  # an --available-now run's progress bar (terminal only)
        self._catch_up_from = 0

    # -- lifecycle ----------------------------------------------------------------------------

    def run(self, *, available_now: bool = False, startup: BatchPhases | None = None) -> int:
        """Run the query until it ends (``available_now``) or is stopped. ``startup`` times
        what came before (``ttl run``'s session, store, lease...); the "started" line
        gives its split."""
        startup = startup or BatchPhases()
        with startup.phase("lease"):
            self._take_lease()
        self.lease.start_heartbeat(on_lost=self._lease_lost)
        self.metrics.lease_held.labels(self.conf.store.name).set(1)
        if self.conf.metrics.port is not None:
            self._serve_metrics(self.conf.metrics.port)
        scheduler = schedule.build(self.conf, self.jobs, blocking=False)
        previous = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        failure: BaseException | None = None
        try:
            for sig in previous:
                signal.signal(sig, lambda *_: self.stop())
            with self.lock:
                with startup.phase("publish"):
                    # catch up on versions an earlier run left unpublished
                    self.publication.after_current()
                try:
                    with startup.phase("expiry_floor"):
                        eviction.prime_expiry_floor(self.store)
                except Exception:  # noqa: BLE001 - only a shortcut: the sweep computes it
                    log.warning("could not learn %s's earliest expiry at start-up; the "
                                "first sweep will", self.conf.store.name, exc_info=True)
            scheduler.start()
            # The input's (first, last stable) offsets, read once: the lost-input check,
            # a new checkpoint's partitions and an --available-now catch-up's target.
            self.input_marks = self.kafka.watermarks(self.conf.kafka.input_topic) or {}
            if available_now:
                self.end_offsets = {p: high for p, (_, high) in self.input_marks.items()}
            with startup.phase("batch_size"):
                self.batch_records = self._batch_bound()
            self.position = self._recorded_position()
            self._refuse_a_checkpoint_ahead()
            skipped = self._lost_input(available_now)
            if available_now:
                self._catch_up_bar = self._start_catch_up_bar()
            with startup.phase("query"):
                self.query = self._start_query(available_now, fail_on_data_loss=not skipped)
            self.query_started.set()
            split = startup.as_dict()
            total = split.pop("total")
            log.info("stream %s started in %.1f s (%s; query %s, checkpoint %s)",
                     self.conf.store.name, total,
                     ", ".join(f"{k} {v:.1f}" for k, v in split.items()), self.query.id,
                     self.conf.stream.checkpoint)
            try:
                while self.query.isActive and not self.stopping.is_set():
                    self.query.awaitTermination(1)
                if self.query.exception() is not None:
                    raise self.query.exception()
                self.publication.wait()  # the last batch's; raises what stopped the run
                if self.batch_error is not None:
                    raise self.batch_error
            except Exception:
                if self.batch_error is not None:  # our own error, not Spark's wrapping of it
                    raise self.batch_error from None
                raise
            if available_now and self.conf.eviction.clock in ("wall", "both"):
                self.jobs.wall_sweep()
            return 0
        except BaseException as exc:
            failure = exc
            raise
        finally:
            try:
                self._shut_down(scheduler, failure)
            finally:  # a second signal while stopping only asks to stop again
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

    def _shut_down(self, scheduler, failure: BaseException | None) -> None:
        """Stop the query and the scheduler, publish what is left, close the producer, give
        back the lease: every step runs even when an earlier one fails (a lease kept would
        block the next run for a lease period; an unclosed producer loses its queue). The
        first failure is raised afterwards, unless the run already failed (that error is
        the one to see; the shutdown's are logged with their tracebacks)."""
        steps = [
            ("stop the query", lambda: self.query is not None and self.query.isActive
             and self.query.stop()),
            # The scheduler first: a sweep it finishes starts a warm-up that quiesce joins.
            ("stop the scheduler", lambda: scheduler.running and scheduler.shutdown(wait=True)),
            ("finish the snapshot warm-up and a checkpoint", self.store.quiesce),
            # Also joins a batch's publication under way, and raises its error.
            ("publish the last versions", self._publish_locked),
            ("close the changelog producer", self.publisher.close),
            ("release the lease", self.lease.release),
            ("stop the metrics endpoint", self._close_metrics),
            ("close the progress bar", lambda: self._catch_up_bar is not None
             and self._catch_up_bar.close()),
        ]
        first: BaseException | None = None
        for what, step in steps:
            try:
                step()
            except BaseException as exc:  # noqa: BLE001 - the remaining steps must still run
                log.error("stream %s: could not %s while stopping: %s", self.conf.store.name,
                          what, exc, exc_info=failure is not None or first is not None)
                first = first or exc
        self.summary.evicted["wall"] = self.jobs.evicted_total
        log.info("stream %s stopped: %s", self.conf.store.name, self.summary.line())
        if first is not None and failure is None:
            raise first

    def _serve_metrics(self, port: int) -> None:
        try:
            self.metrics.serve(port)
        except OSError as exc:
            self.lease.release()
            raise ConfigError(f"{self.conf.source}: metrics.port = {port}: cannot serve "
                              f"metrics there ({exc})") from None

    def _close_metrics(self) -> None:
        self.metrics.lease_held.labels(self.conf.store.name).set(0)
        self.metrics.close()

    def _job_failed(self, exc: BaseException) -> None:
        """A scheduled job met a store it can no longer write: the run ends with it."""
        self.batch_error = self.batch_error or exc
        self.stop()

    def _lease_lost(self) -> None:
        self.metrics.lease_held.labels(self.conf.store.name).set(0)
        self.stop()

    def _publish_locked(self):
        with self.lock:
            return self.publication.after_current()

    def _take_lease(self) -> None:
        take_lease(self.lease, self.conf.store.name, self.conf.eviction.lease)

    def stop(self) -> None:
        """Graceful stop (signal handler, lost lease): the main loop ends the query."""
        self.stopping.set()

    def _lost_input(self, available_now: bool) -> bool:
        """Refuse to start when input the store has not consumed is gone from the topic
        (``InputLost``, naming each partition's lost range), or, under
        ``stream.on_lost_input = "skip"`` in an ``--available-now`` run (so no later loss
        passes unnoticed), record the skipped ranges in a commit and move the position past
        them. Where the run resumes is the checkpoint's position if it has one (Spark
        resumes from it), else the table's. Returns whether something was skipped."""

        resume = input_position.resume_at(self.position, self._checkpoint_position())
        lost = input_position.lost(resume, {str(p): low for p, (low, _)
                                            in self.input_marks.items()})
        if not lost:
            return False
        ranges = ", ".join(f"partition {p} offsets {a}..{b - 1} ({b - a} records)"
                           for p, (a, b) in sorted(lost.items()))
        where = f"input topic {self.conf.kafka.input_topic}: {ranges}"
        if self.conf.stream.on_lost_input == "stop" or not available_now:
            how = ("" if self.conf.stream.on_lost_input == "stop" else
                   "; stream.on_lost_input = skip is honoured by `ttl run --available-now` "
                   "only (a long run would skip later losses unnoticed)")
            raise InputLost(f"{where} are gone (retention passed before the store read "
                            f"them){how}")
        position = {**self.position, **{p: low for p, (_, low) in lost.items()}}
        audit = {p: [a, b] for p, (a, b) in lost.items()}
        meta = {"op": OP_INPUT_SKIPPED, "store": self.conf.store.name,
                "lost_input": audit, "input_offsets": position}
        with self.lock, commit.commit_settings(self.spark, meta):
            self.store.check_writable()
            set_properties(self.spark, self.store.path, {PROP_INPUT_SKIPPED: json.dumps(audit)})
        self.position = position
        log.warning("skipping lost input (stream.on_lost_input = skip): %s; recorded in the "
                    "table's commit history", where)
        return True

    def _refuse_a_checkpoint_ahead(self) -> None:
        """Refuse an existing checkpoint that would resume the input past the position the
        table holds (``input_position``): one from before a restore. Offsets between that
        hold no record (transaction markers) are no gap; a restore that recorded no input
        position makes any checkpoint from before it a gap of unknown size."""

        checkpoint = self._checkpoint_position()
        if checkpoint is None:
            return
        where = (f"checkpoint {self.conf.stream.checkpoint} resumes input topic "
                 f"{self.conf.kafka.input_topic} at {checkpoint}")
        if self.position_unknown:
            raise CheckpointAhead(
                f"{where}, but the table records no input position (it was created anew, or "
                "restored from a point in time or a changelog without progress): which input "
                "it holds is unknown, and resuming at the checkpoint (another table's, or "
                "older than the restore) could skip records; nothing was read")
        gaps = input_position.gaps_ahead(checkpoint, self.position)
        topic = self.conf.kafka.input_topic
        skipped = {p: (a, b) for p, (a, b) in gaps.items()
                   if self.kafka.first_record(topic, int(p), a, b) is not None}
        if skipped:
            raise CheckpointAhead(
                f"{where}, past the position the table holds ({self.position}): it would "
                f"skip {input_position.describe(skipped)}, which the table never applied "
                "(a checkpoint from before a restore); nothing was read")

    def _path_fixed(self) -> str | None:
        """Where every batch is folded, ``driver`` or ``executors``, when that does not
        depend on the batch: ``stream.batch_path``, and ``auto`` on a ``local`` master
        (the driver); ``None``: chosen per batch (``_on_executors``)."""
        path = self.conf.stream.batch_path
        if path != "auto":
            return path
        return "driver" if self.spark.sparkContext.master.startswith("local") else None

    def _batch_bound(self) -> int:
        """``stream.max_offsets_per_trigger``, or under ``auto`` ``stream.batch_bytes`` in
        records of the size of the input's newest ones (``ttl.batch_size``), kept to half
        of ``spark.driver.maxResultSize`` where every batch is read into the driver
        (``local`` masters, ``stream.batch_path = "driver"``). On a cluster under
        ``batch_path = "auto"`` the batches the driver would fold stay under that half
        instead (``driver_records``: a larger one goes to the executors)."""
        s = self.conf.stream
        if s.max_offsets_per_trigger != "auto":
            return s.max_offsets_per_trigger
        try:
            sample = self.kafka.newest_records(self.conf.kafka.input_topic, self.input_marks)
        except Exception:  # noqa: BLE001 - only an estimate: the assumed size stands in
            log.warning("could not sample the input's records for the batch size; assuming "
                        "%d B a record", batch_size.UNSAMPLED_RECORD_BYTES, exc_info=True)
            sample = batch_size.Sample(0, 0)
        limit = None
        if s.batch_path != "executors":
            setting = self.spark.sparkContext.getConf().get("spark.driver.maxResultSize", "1g")
            try:
                limit = batch_size.spark_bytes(setting)
            except ValueError as exc:
                raise ConfigError(f"spark.driver.maxResultSize: {exc}") from None
        fixed = self._path_fixed()
        chosen = batch_size.bound(s.batch_bytes, sample,
                                  max_result_bytes=limit if fixed == "driver" else None)
        if fixed is None:
            self.driver_records = batch_size.driver_records(sample, limit)
        log.info("a batch of %s takes at most %s records (%s)", self.conf.store.name,
                 f"{chosen.records:,}", chosen.why)
        return chosen.records

    def _start_query(self, available_now: bool, *, fail_on_data_loss: bool = True):
        k, s = self.conf.kafka, self.conf.stream
        reader = (self.spark.readStream.format("kafka")
                  .options(**self.kafka.spark_options())
                  .option("subscribe", k.input_topic)
                  .option("includeHeaders", "true")
                  .option("startingOffsets", self._starting_offsets())
                  .option("failOnDataLoss", str(fail_on_data_loss).lower())
                  .option("maxOffsetsPerTrigger", self.batch_records))
        writer = (reader.load().writeStream.foreachBatch(self._batch)
                  .option("checkpointLocation", s.checkpoint)
                  .queryName(query_name(self.conf.store.name)))
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime=f"{s.trigger} milliseconds")
        return writer.start()

    def _recorded_position(self) -> dict[str, int]:
        """The input position the table records (``delta_log.recorded_position``): per
        partition, the newest commit's ``input_offsets`` that names it, back to the last
        whole position (a restore's or a skip's, or the floor's). Batches record the whole
        position, so the newest commit usually gives every partition; a table written
        before that still gives every partition its older batches read (``{}`` for a table
        no batch has written)."""
        found = delta_log.recorded_position(self.spark, self.store.path)
        self.last_batch, self.position_unknown = found.last_batch, found.unknown
        return found.position

    def _checkpoint_position(self) -> dict[str, int] | None:
        """Where an existing checkpoint resumes the input: the offsets its last committed
        batch ended at (``None`` without a committed batch)."""
        jvm = self.spark.sparkContext._jvm
        hadoop = self.spark.sparkContext._jsc.hadoopConfiguration()
        root = jvm.org.apache.hadoop.fs.Path(self.conf.stream.checkpoint)
        fs = root.getFileSystem(hadoop)
        commits = jvm.org.apache.hadoop.fs.Path(root, "commits")
        if not fs.exists(commits):
            return None
        ids = [int(f.getPath().getName()) for f in fs.listStatus(commits)
               if f.getPath().getName().isdigit()]
        if not ids:
            return None
        text = delta_log.read_text(self.spark, f"{root.toString()}/offsets/{max(ids)}")
        for line in text.splitlines()[2:]:  # version, metadata, then one line per source
            offsets = json.loads(line).get(self.conf.kafka.input_topic)
            if offsets is not None:
                return {str(p): int(o) for p, o in offsets.items()}
        return None

    def _starting_offsets(self) -> str:
        """Where a *new* checkpoint starts: right after the input the table last recorded,
        else the earliest offsets (a partition never read starts at its earliest). An
        existing checkpoint ignores this (Spark resumes from it)."""
        jvm = self.spark.sparkContext._jvm
        hadoop = self.spark.sparkContext._jsc.hadoopConfiguration()
        marker = jvm.org.apache.hadoop.fs.Path(self.conf.stream.checkpoint + "/offsets")
        if marker.getFileSystem(hadoop).exists(marker) or not self.position:
            return "earliest"
        log.info("new checkpoint: input resumes at %s (recorded in the table)", self.position)
        start = input_position.starting(self.position, self.input_marks)
        return json.dumps({self.conf.kafka.input_topic: start})

    # -- one micro-batch ----------------------------------------------------------------------

    def _batch(self, frame, batch_id: int) -> None:
        from pyspark.sql import functions as F

        phases = BatchPhases(self.spark)
        records = frame.select(
            "key", "value",
            F.when(F.col("timestamp").isNull(), F.lit(-1))
             .otherwise(F.unix_millis("timestamp")).alias("timestamp"),
            "headers", "partition", "offset")
        table = None
        if not self._on_executors():
            with phases.phase("read"):  # the one read of the Kafka input (Arrow, driver side)
                table = records.toArrow()
        self.query_started.wait()  # the first batch can start before start() returns
        query_id = self.query.id
        txn = (batch_txn_app_id(self.conf.store.name, query_id), batch_id)
        position: dict[str, int] = {}
        lookups_before = Counter(self.store.lookup.reads)

        def metadata(first: dict[str, int], after: dict[str, int]) -> dict:
            """The commit's input position, once the batch is known not to re-read input
            the table holds (``_check_replay``)."""
            self._check_replay(first, after, str(query_id), batch_id)
            position.update({**self.position, **after})
            return {"input_offsets": dict(position), "whole_position": True,
                    "batch_id": batch_id, "query_id": query_id}

        try:
            if table is not None:
                meta = metadata(input_position.first_offsets(table),
                                input_position.next_offsets(table))
            with phases.phase("lock_wait"):  # a wall sweep may hold the lock
                self.lock.acquire()
            result, handed = None, False
            try:
                if table is not None:
                    result = self.store.apply_batch(table, metadata=meta, txn=txn,
                                                    phases=phases, keep_changes=True)
                else:  # checked, on the executors' figures, before anything is written
                    # Published from the executors, the change rows stay there.
                    keep = "held" if self.publication.from_executors else True
                    result = self.store.apply_frame(
                        records, txn=txn, phases=phases, keep_changes=keep,
                        metadata=lambda f: metadata(f.first_offsets, f.next_offsets))
                with phases.phase("sweep"):
                    evicted = self._stream_sweep()
                with phases.phase("floor"):  # now and then: a start-up reads few commits
                    self.store.raise_stream_time_floor(result.version)
                with phases.phase("publish_wait"):  # the previous batch's publication
                    self.publication.wait()
                own = time.monotonic() - phases.started
                jobs = {"spark_jobs": phases.spark_jobs(),
                        "codegen_compiles": phases.codegen_compiles()}
                # Up to this batch's (and its sweep's) version only: the next batch's commit
                # is published by the next batch, from its own rows.
                upto = delta_log.latest_version(self.spark, self.store.path)
                stream_time = self.store.stream_time.value
                offsets = dict(position)
                how = {"folded_on": "driver" if table is not None else "executors",
                       "lookups": dict(self.store.lookup.reads - lookups_before)}
                self.publication.behind(result, upto, phases, lambda published: self._batch_done(
                    batch_id, result, evicted, published, phases, jobs, own, offsets,
                    stream_time, how))
                handed = True  # the publication owns the batch's change rows now
            finally:
                self.lock.release()
                if not handed:  # the run ends here
                    publication.release(result)
            self.position = offsets
            self.last_batch = (str(query_id), batch_id)
        except TtlError as exc:  # the run ends with it (one line), not Spark's wrapping
            self.batch_error = exc
            raise
        finally:
            phases.close()  # on this thread (the job group is a thread's property)

    def _on_executors(self) -> bool:
        """Whether this batch is folded on the executors (``ttl.store.distributed``) rather
        than in the driver: ``stream.batch_path``; under ``auto``, on a cluster (a master
        that is not ``local``) for a batch of at least ``stream.executor_min_records``
        records, or of more than ``driver_records`` (half of ``spark.driver.maxResultSize``
        at the sampled record size), as far as the input's end offsets tell before it is
        read (an estimate: the batch is at most ``batch_records``)."""
        s = self.conf.stream
        fixed = self._path_fixed()
        if fixed is not None:
            return fixed == "executors"
        try:
            marks = self.kafka.watermarks(self.conf.kafka.input_topic) or {}
        except Exception:  # noqa: BLE001 - only an estimate: the way that bounds the driver
            log.debug("no input end offsets for the batch's size; folding on the executors",
                      exc_info=True)
            return True
        waiting = input_position.waiting(self.position, marks)
        estimate = min(waiting, self.batch_records)
        return estimate >= s.executor_min_records or (
            self.driver_records is not None and estimate > self.driver_records)

    def _batch_done(self, batch_id: int, result, evicted: dict, published, phases,
                    jobs: dict, own: float, offsets: dict[str, int],
                    stream_time: int | None, how: dict) -> None:
        """The batch is published: account for it and write its log line (from the
        publication's thread; ``duration_s`` is the batch's own time, its publication,
        overlapping the next batch, is ``phases_s.publish``)."""
        self._account(result, evicted, published)
        seconds = phases.as_dict()
        seconds["total"] = round(own, 3)
        self.metrics.batch(result.counts, seconds, stream_time)
        batch_log.info(json.dumps({
            "batch": batch_id, "records_in": result.counts.records,
            "upserted": result.counts.upserted, "deleted": result.counts.deleted,
            "delete_absent": result.counts.delete_absent,
            "rejected": dict(result.counts.rejected),
            "late_dropped": result.counts.late_dropped,
            "expired_on_arrival": result.counts.expired_on_arrival,
            "evicted": evicted, "changelog_records": published.records,
            "publication_lag_versions": published.lag_versions,
            "published_from": published.published_from,
            "duration_s": seconds["total"], "phases_s": seconds,
            **how,  # where the batch was folded, and its lookups by reader
            **jobs, "write": result.write, "write_metrics": result.metrics,
            "write_by_hash": result.by_hash,
            "stream_time": stream_time, "applied": result.applied,
            "input_offsets": offsets, "catch_up": self._catch_up(offsets),
        }, sort_keys=True))

    def _check_replay(self, first: dict[str, int], after: dict[str, int], query_id: str,
                      batch_id: int) -> None:
        """Refuse a batch (its first offsets and those after it, per input partition) that
        re-reads input the table has applied, unless it is the replay of the batch that
        recorded the position (same query and batch id, nothing beyond the position:
        Delta's txn id skips it). Anything else is a regressed checkpoint: applied, it would
        put old records back over newer state; skipped as "already applied" by a reused
        batch id, it would drop the new records it also holds."""

        behind = input_position.regressed(first, after, self.position, self.last_batch,
                                          query_id, batch_id)
        if not behind:
            return
        where = ", ".join(f"partition {p} from offset {o} (applied up to {at})"
                          for p, (o, at) in sorted(behind.items()))
        raise CheckpointRegressed(
            f"batch {batch_id} of checkpoint {self.conf.stream.checkpoint} re-reads input of "
            f"{self.conf.kafka.input_topic} the table has already applied: {where}; the "
            "checkpoint is behind the table (restored from a backup, or older than a "
            "restore), so nothing was written")

    def _catch_up(self, offsets: dict[str, int]) -> str | None:
        if not self.end_offsets:
            return None
        done = sum(min(offsets.get(str(p), 0), end) for p, end in self.end_offsets.items())
        if self._catch_up_bar is not None:
            move_to(self._catch_up_bar, done - self._catch_up_from)
        return f"{done}/{sum(self.end_offsets.values())}"

    def _start_catch_up_bar(self):
        """A bar over the offsets an --available-now run has to read (from where each
        partition resumes to the end captured at start)."""
        resume = self._checkpoint_position() or {}
        start = {p: max(low, resume.get(str(p), self.position.get(str(p), low)))
                 for p, (low, _) in self.input_marks.items()}
        self._catch_up_from = sum(min(start[p], end) for p, end in self.end_offsets.items())
        total = sum(self.end_offsets.values()) - self._catch_up_from
        return bar(total, f"catch-up {self.conf.kafka.input_topic}", unit="offsets")

    def _stream_sweep(self) -> dict:
        """A stream-time sweep when stream time moved ``eviction.stream_interval``; returns
        the evicted count. Its tombstones go out with the batch's publication (which
        publishes every version up to the newest)."""
        evicted = {"stream": 0}
        if self.conf.eviction.clock not in ("stream", "both"):
            return evicted
        now = self.store.stream_time.value
        if now is None:
            return evicted
        due = (self._last_stream_sweep is None
               or now - self._last_stream_sweep >= self.conf.eviction.stream_interval)
        if due:
            swept = eviction.sweep(self.store, "stream", now, warm=True)
            self.metrics.sweep(swept)
            # After the batch, outside the lock (it reads the change data), one at a time:
            # a sweep that comes while one is measured goes without the figure.
            if swept.evicted and self._measuring.acquire(blocking=False):

                def lateness(result=swept) -> None:
                    try:
                        self.metrics.sweep_lateness(
                            eviction.measure_lateness(self.store, result))
                    finally:
                        self._measuring.release()

                if not self.store.in_background("ttl-sweep-lateness", lateness):
                    self._measuring.release()
            evicted["stream"] = swept.evicted
            self._last_stream_sweep = now
        return evicted

    def _published(self, result) -> None:
        self.summary.published += result.records
        self.metrics.publication(result)

    def _publication_failed(self, exc: BaseException) -> None:
        """A background publication failed: the stream stops with its error."""
        self.batch_error = exc
        log.error("stream %s: publication failed: %s", self.conf.store.name, exc)
        self.stop()

    def _account(self, result, evicted: dict, published) -> None:
        s = self.summary
        s.batches += 1
        s.records += result.counts.records
        s.upserted += result.counts.upserted
        s.deleted += result.counts.deleted
        s.rejected += sum(result.counts.rejected.values())
        s.expired_on_arrival += result.counts.expired_on_arrival
        s.evicted["stream"] += evicted.get("stream", 0)
        s.evicted["wall"] = self.jobs.evicted_total

