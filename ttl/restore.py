"""Restore a store's table from its changelog (docs/semantics.md), as an explicit state machine.

    NOT_STARTED -> READING -> WRITING -> DONE
         any state except DONE -> FAILED

1. **Reading.** End offsets are captured first (``read_committed``: the last stable offsets);
   a bounded Spark batch read of the topic up to them follows, so it scales with the
   cluster. A record converter turns each Kafka record into (key, value or tombstone, ts,
   user headers, per-record TTL, version, stream time): ``engine`` reads our own headers
   (``ttl.ts`` with the Kafka timestamp as fallback, ``ttl.ttl``, ``ttl.version``,
   ``ttl.stream-time``) and strips them; ``plain`` takes a foreign changelog (a Kafka Streams
   store's: value bytes, record timestamp, headers) as it is (KIP-258's RecordConverter idea).
2. Per key the last record in offset order wins (one aggregation: one shuffle); a key found
   in two partitions is an error naming it; tombstones drop the key; ``expires_at`` is
   recomputed from ts and the TTL.
3. **Writing.** One overwrite commit (a new table, or a new version of an existing one whose
   previous version stays reachable by time travel), whose metadata records the topic, end
   offsets, last ``ttl.version``, stream time and the input offsets to resume from.
4. For disaster recovery (``finish_recovery``, run by ``ttl.commands.restore`` into the store's
   own table) a sweep follows (entries that expired meanwhile leave with tombstones), and
   the publisher's progress moves to the restore's version: the restored state is already
   on the topic, and only changes after it are published.
"""

from __future__ import annotations

import enum
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ttl import commit, config, delta_log, eviction
from ttl.bars import SparkProgress, bar, move_to
from ttl.changelog import topic
from ttl.changelog.format import version_offset
from ttl.changelog.progress import published_progress
from ttl.changelog.reader import (
    bounded_ends,
    convert,
    live_last,
    per_key,
    read_topic,
    split_key_error,
    watermarks,
)
from ttl.clock import WallClock, wall_ms_or_now
from ttl.config import Config
from ttl.errors import RestoreError
from ttl.kafka import KafkaClients
from ttl.names import (
    OP_RESTORE,
    PROP_CONTINUES_AFTER,
    PROP_RESEED_REQUIRED,
    PROP_RESTORE_PENDING,
    PROP_VERSION_OFFSET,
    progress_topic,
)
from ttl.phases import BatchPhases
from ttl.store import layout
from ttl.timestamps import expiry_column

log = logging.getLogger(__name__)


class State(enum.Enum):
    NOT_STARTED = "not started"
    READING = "reading"
    WRITING = "writing"
    DONE = "done"
    FAILED = "failed"


_ALLOWED = {
    State.NOT_STARTED: {State.READING, State.FAILED},
    State.READING: {State.WRITING, State.FAILED},
    State.WRITING: {State.DONE, State.FAILED},
    State.DONE: set(),
    State.FAILED: set(),
}


@dataclass
class RestoreResult:
    topic: str
    target: str
    state: State = State.NOT_STARTED
    end_offsets: dict[int, int] = field(default_factory=dict)
    topic_settings: dict[str, str] = field(default_factory=dict)  # as checked at the start
    records_total: int = 0
    records_read: int = 0
    keys_restored: int = 0
    last_version: int | None = None
    stream_time: int | None = None
    input_offsets: dict = field(default_factory=dict)
    version: int | None = None
    seconds: float = 0.0
    swept: int = 0
    warnings: list[str] = field(default_factory=list)
    bar: object | None = field(default=None, repr=False)  # the terminal's progress bar
    changelog_floor: int | None = None  # the highest version the changelog holds
    # Not the store's whole changelog (a point in time, another topic): the store's
    # changelog cannot be continued from this table without a re-seed.
    partial: bool = False
    changelog_version: int | None = None  # the restore's version on the changelog
    # Where the time went (seconds): ``read`` (the topic read and per-key aggregate, one
    # Spark job), ``table_wait`` (the target's creation or check, run beside the read, not
    # yet done when the read was), ``write`` (the overwrite commit), ``finish`` (its
    # figures and the version marks).
    phases: BatchPhases = field(default_factory=BatchPhases, repr=False)
    _read_fraction: float = field(default=0.0, repr=False)

    @property
    def phases_s(self) -> dict[str, float]:
        return self.phases.seconds

    def move(self, new: State) -> None:
        if new not in _ALLOWED[self.state]:
            raise RestoreError(f"illegal restore transition {self.state.value} -> {new.value}")
        log.info("restore of %s: %s -> %s", self.target, self.state.value, new.value)
        self.state = new

    def report_reading(self, fraction: float) -> None:
        """Progress while reading: records read (estimated from finished tasks) of total.

        Never backwards: the estimate drops when the aggregate's second stage adds its
        tasks (seen: 40% then 36%), which says nothing about the records read."""
        fraction = self._read_fraction = max(fraction, self._read_fraction)
        log.info("restore of %s: reading, ~%d of %d records (%.0f%%)", self.target,
                 round(fraction * self.records_total), self.records_total, 100 * fraction)
        if self.bar is not None:
            move_to(self.bar, round(fraction * self.records_total))

    @property
    def rate(self) -> float:
        return self.records_read / self.seconds if self.seconds else 0.0

    def summary(self) -> str:
        return (f"restore {self.state.value}: {self.records_read} records read of "
                f"{self.records_total} offsets in "
                f"{self.topic} (end offsets {self.end_offsets}), {self.keys_restored} keys "
                f"restored into {self.target} at version {self.version} (changelog version "
                f"{self.changelog_version}), last ttl.version "
                f"{self.last_version}, stream time {self.stream_time}, swept {self.swept}, "
                f"{self.seconds:.1f} s ({self.rate:,.0f} records/s; "
                + ", ".join(f"{k} {v:.1f} s" for k, v in self.phases_s.items()) + ")"
                + "".join(f"\nwarning: {w}" for w in self.warnings))


def _expiry(ttl_ms: int | None):
    """``expires_at`` from the record's own TTL, else the store's."""
    from pyspark.sql import functions as F

    return expiry_column("ts", F.coalesce(F.col("record_ttl"), F.lit(ttl_ms).cast("bigint")))


def restore(spark, conf: Config, kafka: KafkaClients, target: str, *,
            converter: str = "engine",
            until_version: int | None = None, until_offsets: dict[int, int] | None = None,
            source_topic: str | None = None, check_topic: bool = True,
            wall_ms: int | None = None, point_is_progress: bool = False,
            before_write: Callable[[], None] | None = None) -> RestoreResult:
    """Rebuild ``target`` from the changelog in one commit; see the module docstring.
    ``point_is_progress``: ``until_version`` is the publisher's progress read just before
    (a drill), so every record after it is newer than that read. ``before_write`` runs
    before each of the restore's commits to ``target`` and may refuse them by raising (a
    claimed target's lease check)."""
    from pyspark.sql import functions as F

    name = source_topic or conf.kafka.changelog_topic
    result = RestoreResult(name, target)
    started = time.monotonic()
    try:
        result.move(State.READING)
        if check_topic:
            state = topic.describe(kafka, name)
            problems = topic.violations(state, name, None,
                                        engine_format=converter == "engine")
            if problems:
                raise RestoreError("; ".join(problems))
            result.topic_settings = dict(state.settings)
        progress = None
        whole = converter == "engine" and until_version is None and until_offsets is None
        if whole:
            # Read before the end offsets are captured: every version up to the progress's is
            # then inside the read (its records commit in the progress's transaction).
            progress = _progress(kafka, name)
        # The store's own changelog, whatever the source: the restored table's versions
        # must continue after everything published there (a trailing no-op batch or an
        # OPTIMIZE moves the progress past the last record's ttl.version).
        own = progress if name == conf.kafka.changelog_topic and progress is not None else \
            published_progress(kafka, progress_topic(conf.kafka.changelog_topic))
        result.partial = not whole or name != conf.kafka.changelog_topic
        marks = watermarks(kafka, name)
        result.end_offsets = bounded_ends(marks, until_offsets)
        result.records_total = sum(max(0, end - marks[p][0])
                                   for p, end in result.end_offsets.items())
        records = read_topic(spark, kafka, name, result.end_offsets, result.records_total)
        converted = convert(records, converter)
        # The topic is read once: the per-key aggregate (one row per key, far fewer than
        # the records) is kept for the figures and the write. A point-in-time restore
        # sees nothing after its version.
        keyed = per_key(converted, until_version).persist()
        result.bar = bar(result.records_total, f"restore {name}: reading")
        with ThreadPoolExecutor(1, thread_name_prefix="ttl-restore-table") as pool:
            table = _target_table(spark, conf, target, pool)
            try:
                with result.phases.phase("read"), result.bar, \
                        SparkProgress(spark, result.report_reading):
                    stats = keyed.agg(F.coalesce(F.sum("n"), F.lit(0)).alias("n"),
                                      F.max("v").alias("v"), F.max("st").alias("st"),
                                      F.min("beyond").alias("beyond"),
                                      F.max("t_in").alias("t_in"),
                                      F.max("v_all").alias("v_all")).first()
                result.records_read = stats.n
                if until_version is not None or until_offsets is not None:
                    beyond = stats.beyond if until_offsets is None else _first_append_after(
                        kafka, name, result.end_offsets, marks)
                    result.warnings += compaction_warnings(
                        _settings(kafka, name, result), name, beyond, stats.t_in,
                        WallClock().now_ms(), point_is_progress=point_is_progress)
                with result.phases.phase("table_wait"):
                    props = table()
                if stats.n == 0 and _has_rows(spark, target):
                    raise RestoreError(f"changelog {name} is empty but {target} has entries: "
                                       "refusing to replace them with nothing (wrong topic?)")
                result.last_version = stats.v
                result.stream_time = stats.st
                if progress is not None:
                    _resume_from(progress, result)
                # The highest version the changelog is known to hold: the restored table's
                # versions continue after it there (its version offset).
                own_records = stats.v_all if name == conf.kafka.changelog_topic else None
                result.changelog_floor = max((v for v in (own_records, own and own.highest)
                                              if v is not None), default=None)
                result.move(State.WRITING)
                try:
                    _write(spark, conf, target, props, live_last(keyed), result, wall_ms,
                           before_write)
                except Exception as exc:
                    split = split_key_error(exc)
                    if split is None:
                        raise
                    raise split from None
            finally:
                keyed.unpersist()
        result.move(State.DONE)
    except Exception:
        if result.state is not State.DONE:
            result.state = State.FAILED
        raise
    finally:
        result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result


def _target_table(spark, conf: Config, target: str,
                  pool: ThreadPoolExecutor) -> Callable[[], dict[str, str]]:
    """The target's properties once it exists, as a call for the write to make.

    * An existing table's layout is checked now, before the read: a wrong one fails at
      once, not after reading the whole topic.
    * A new table at a new path (``--target``, a drill) is created beside the read: the
      first Delta commit of a process takes seconds on its own (3.3 s measured after a
      1M-record read, on 2 cores), mostly the driver's, while the read keeps the executors
      busy. A restore that fails leaves it empty, and a retry overwrites it.
    * The store's own path, gone (a disaster recovery), is created only after the read:
      an empty table there would stand for the store (``ttl restore`` checks a table at
      that path before replacing it).
    """

    def create() -> dict[str, str]:
        # A table this restore creates is marked until its last commit: a failed
        # restore's retry may overwrite it (``ttl.changelog.continuity``).
        return layout.ensure_store_table(spark, target, conf.store.name, conf.store.ttl,
                                         deletion_vectors=conf.store.deletion_vectors,
                                         creation_marks={PROP_RESTORE_PENDING: "true"})

    if delta_log.is_delta_table(spark, target):
        props = create()
        return lambda: props
    if config.same_location(target, conf.store.path):
        return create
    return pool.submit(create).result


def _first_append_after(kafka: KafkaClients, name: str, ends: dict[int, int],
                        marks: dict[int, tuple[int, int]]) -> int | None:
    """The earliest append time (ms) of the records after ``ends`` (a restore to changelog
    positions does not read them): per partition the first record at or after its end, as
    append times grow with offsets (``LogAppendTime``)."""
    from confluent_kafka import TopicPartition

    found: list[int] = []
    consumer = kafka.consumer()
    try:
        for p, end in ends.items():
            if end >= marks[p][1]:
                continue
            consumer.assign([TopicPartition(name, p, end)])
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    found.append(msg.timestamp()[1])
                    break
    finally:
        consumer.close()
    return min(found) if found else None


def _settings(kafka: KafkaClients, name: str, result: RestoreResult) -> dict[str, str]:
    """The topic's settings: as checked at the start, else described now."""
    if result.topic_settings:
        return result.topic_settings
    state = topic.describe(kafka, name)
    return state.settings if state is not None else {}


def compaction_warnings(settings: dict[str, str], name: str, beyond_ms: int | None,
                        newest_at_point_ms: int | None, now_ms: int, *,
                        point_is_progress: bool = False) -> list[str]:
    """What a point-in-time restore must say about compaction (it cannot be exact there).

    Compaction removes a record up to the point only because a newer record of the same key
    exists after it, and Kafka's cleaner only compacts against records older than
    ``min.compaction.lag.ms``:

    1. the earliest record still after the point (``beyond_ms``) is older than that: it may
       have removed records of the point;
    2. a tombstone after the point, once older than ``delete.retention.ms``, is itself
       removed, leaving no trace of what it replaced. Every record after the point was
       written after the newest record up to it (``newest_at_point_ms``), so while that one
       is younger than the retention, no such tombstone can be gone. A drill's point is the
       progress read just before (``point_is_progress``): nothing after it is old.
    """
    out = []
    lag_ms = int(settings.get("min.compaction.lag.ms", "0"))
    if beyond_ms is not None and now_ms - beyond_ms >= lag_ms:
        out.append(f"the changelog {name} holds records after this point written "
                   f"{(now_ms - beyond_ms) / 1000:,.0f} s ago, not less than its "
                   f"min.compaction.lag.ms ({lag_ms / 1000:,.0f} s): compaction may have "
                   "removed records of the point they replaced, so this point-in-time "
                   "restore may lack keys or hold older values than the table had then")
    retention_ms = int(settings.get("delete.retention.ms", str(86_400_000)))
    if not point_is_progress and newest_at_point_ms is not None and \
            now_ms - newest_at_point_ms >= retention_ms:
        out.append(f"this point is older than the changelog {name}'s delete.retention.ms "
                   f"({retention_ms / 1000:,.0f} s): a tombstone written after it may "
                   "since have been removed together with the records it replaced, so this "
                   "point-in-time restore may lack keys")
    if out:
        out[-1] += (" (a compacted topic keeps only each key's last record; for a point "
                    "this far back use the table's time travel while its history lasts)")
    return out


def _progress(kafka: KafkaClients, name: str):
    """The publisher's last progress on the changelog's ``-progress`` topic; ``None`` (the
    input position stays unknown) when a changelog has no such topic."""
    progress = published_progress(kafka, progress_topic(name))
    if progress is None:
        log.warning("changelog %s has no progress topic %s: the input position to resume "
                    "from is not known", name, progress_topic(name))
    return progress


def _resume_from(progress, result: RestoreResult) -> None:
    """Stream time and the input position to resume from, when the read holds exactly the
    state at the publisher's last progress.

    The progress was read before the end offsets were captured, so every version up to it
    is inside the read. If no record is newer (the last record's ``ttl.version`` is at most
    the progress's: later versions may have published nothing, e.g. an OPTIMIZE, an empty
    batch or a compacted tombstone), the restored state is the state at that version, and
    its input position is the one to resume from. A newer record means a publisher ran
    during the restore: the position is unknown, and the restore says so.
    """
    if progress.stream_time is not None:
        result.stream_time = max(x for x in (progress.stream_time, result.stream_time)
                                 if x is not None)
    if result.last_version is None or result.last_version <= progress.version:
        result.input_offsets = dict(progress.input_offsets)
    elif progress.ahead and result.last_version <= progress.highest:
        log.warning("restore of %s: changelog partitions %s hold versions up to %s, past the "
                    "publisher's progress (version %s): a publication from the executors "
                    "stopped between the partitions' commits and its own, so the input "
                    "position is not recorded", result.target, sorted(progress.ahead),
                    progress.highest, progress.version)
    else:
        log.warning("restore of %s: the changelog holds version %s, newer than the "
                    "publisher's progress (version %s): a publisher ran during the restore, "
                    "so the input position is not recorded", result.target,
                    result.last_version, progress.version)


def _has_rows(spark, path: str) -> bool:
    if not delta_log.is_delta_table(spark, path):
        return False
    return spark.read.format("delta").load(path).limit(1).count() > 0


def _write(spark, conf: Config, target: str, props: dict[str, str], latest,
           result: RestoreResult, wall_ms: int | None,
           before_write: Callable[[], None] | None = None) -> None:
    """The one overwrite commit of the restored rows into ``target`` (created beforehand,
    ``props`` its properties then), and the marks that follow it."""
    from pyspark.sql import functions as F


    now = wall_ms_or_now(wall_ms)
    rows = latest.select(
        F.col("key"), F.col("value"), F.col("ts"), F.col("headers"),
        _expiry(conf.store.ttl).alias("expires_at"), F.lit(now).cast("bigint").alias(
            "updated_at"), F.xxhash64("key").alias("key_hash"), F.col("record_ttl"))
    meta = {"op": OP_RESTORE, "store": conf.store.name, "topic": result.topic,
            "end_offsets": {str(k): v for k, v in result.end_offsets.items()},
            "last_version": result.last_version, "stream_time": result.stream_time,
            "input_offsets": result.input_offsets, "records_read": result.records_read}
    check = before_write or (lambda: None)
    with result.phases.phase("write"):
        check()
        rows.write.format("delta").mode("overwrite").option(
            "userMetadata", commit.encode(meta)).save(target)
    with result.phases.phase("finish"):
        written = delta_log.latest_commit(spark, target)
        result.version = written.version
        result.keys_restored = written.metric("numOutputRows")  # no second pass over the rows
        check()
        offset = _continue_versions(spark, target, props, written.version, result)
        result.changelog_version = written.version + offset


def _continue_versions(spark, target: str, props: dict[str, str], version: int,
                       result: RestoreResult) -> int:
    """The marks a restore leaves on its table, in one metadata commit after the overwrite
    (``version``; a failed overwrite leaves none): the version offset, raised when the
    overwrite's changelog version would not come after ``result.changelog_floor`` (a
    restore into a new table starts again at version 1, and the changelog's versions must
    not go back: drills and point-in-time restores select by them), and whether the table
    needs a re-seed before it can continue the store's changelog (a partial restore; a
    whole one over such a table lifts the mark). Returns the offset."""

    marks = ({PROP_RESEED_REQUIRED: "true"} if result.partial else
             {PROP_RESEED_REQUIRED: "false"} if props.get(PROP_RESEED_REQUIRED) == "true"
             else {})
    # A whole restore holds the changelog's state at its floor: its publisher may take the
    # progress over up to there (``ttl.changelog.continuity``); a partial one only by a
    # re-seed, so it carries no such mark.
    if not result.partial and result.changelog_floor is not None:
        marks[PROP_CONTINUES_AFTER] = str(result.changelog_floor)
    elif props.get(PROP_CONTINUES_AFTER):
        marks[PROP_CONTINUES_AFTER] = ""
    if props.get(PROP_RESTORE_PENDING) == "true":
        marks[PROP_RESTORE_PENDING] = "false"  # written whole: an ordinary table now
    offset = version_offset(props)
    floor = result.changelog_floor
    if floor is not None and version + offset <= floor:
        offset = floor + 1 - version
        marks[PROP_VERSION_OFFSET] = str(offset)
    if marks:
        layout.set_properties(spark, target, marks)
    return offset


def finish_recovery(result: RestoreResult, store, publisher, clock: str) -> list[str]:
    """Disaster recovery's second half, after a restore into the store's own table.

    The restored state is already on the changelog, so the publisher's progress moves to the
    restore's version (with the input offsets to resume from); then sweeps remove what
    expired meanwhile, and their tombstones are published. Returns the summary lines.
    """

    publisher.reset_progress(result.version, store.stream_time.value, result.input_offsets)
    lines = [eviction.sweep(store, "wall").summary()]
    if clock in ("stream", "both"):
        lines.append(eviction.sweep(store, "stream").summary())
    published = publisher.publish()
    lines.append(f"changelog: published {published.records} records (the sweep's "
                 f"tombstones) up to version {published.published_version}")
    lines.append(f"input resumes at {result.input_offsets or 'the checkpoint'}: see the "
                 "README's restore runbook")
    return lines
