"""The one reader of a table's Delta log through Spark: versions, commits and their engine
metadata, table properties, and the conflicts Delta's optimistic concurrency raises (with the
retry helper).

Why one module: the log is read for different reasons (the publisher's metadata, stream time
recovery, a sweep's outcome, restore's resume point) and each used to do it its own way. Here
every Spark read has one implementation, so making one cheaper or correct under log retention
is one change. The commands that run without Spark (``ttl.status``, ``ttl.report``) read the
log with delta-rs instead; the rules they apply to what they read (stream time, the engine's
commit metadata) are the same functions (``ttl.clock``, ``ttl.commit``).

Commits made by the engine carry a JSON ``userMetadata`` document (``ttl.commit``);
``Commit.metadata`` is that document, or ``None`` for a commit made by anyone else (an
operator's SQL, OPTIMIZE, another engine).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from ttl import commit, input_position
from ttl.clock import recovered_stream_time, stream_time_floor
from ttl.java import converters, java_class, none
from ttl.names import OP_RESTORE, PROP_INPUT_POSITION

log = logging.getLogger(__name__)

T = TypeVar("T")

RETRIES = 5
BACKOFF_S = 0.5


@dataclass(frozen=True)
class Commit:
    """One version of a table as its log tells it."""

    version: int
    timestamp_s: float  # commit time, epoch seconds
    operation: str
    metadata: dict | None  # the engine's userMetadata, None for others' commits
    metrics: dict[str, str] = field(default_factory=dict)  # Delta's operationMetrics
    #: The version the commit's transaction read (``commitInfo.readVersion``); Delta checked
    #: it for conflicts only against the commits after that one. None when not recorded.
    read_version: int | None = None

    def metric(self, name: str, default: int = 0) -> int:
        raw = self.metrics.get(name)
        return default if raw is None else int(raw)


def _history(spark, path: str, limit: int | None = None):
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, path)
    return table.history(limit) if limit else table.history()


def _commit(row) -> Commit:
    return Commit(row.version, row.timestamp.timestamp(), row.operation,
                  commit.decode(row.userMetadata), dict(row.operationMetrics or {}),
                  row.readVersion)


def _meta(key: str):
    from pyspark.sql import functions as F

    return F.get_json_object("userMetadata", f"$.{key}")


def read_text(spark, path: str) -> str:
    """A small file's text, read through ``spark``'s Hadoop file system (``s3a://``,
    ``file:``, ``hdfs://`` alike: a checkpoint's offsets, a version's checksum)."""
    where = java_class(spark, "org.apache.hadoop.fs.Path")(path)
    stream = where.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).open(where)
    try:
        return java_class(spark, "org.apache.commons.io.IOUtils").toString(stream, "UTF-8")
    finally:
        stream.close()


def is_delta_table(spark, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def _jvm_log(spark, path: str):
    """The JVM ``DeltaLog`` of a path (cached by Delta per path)."""
    return java_class(spark, "org.apache.spark.sql.delta.DeltaLog").forTable(
        spark._jsparkSession, path)


def _file_names(spark):
    """Delta's ``FileNames`` (the log's file names by version)."""
    return java_class(spark, "org.apache.spark.sql.delta.util.FileNames")


def _updated(spark, path: str):
    """The newest JVM snapshot of a path (``DeltaLog.update``: one listing, no Spark job)."""
    nothing = none(spark)
    return _jvm_log(spark, path).update(False, nothing, nothing)


def table_at(spark, path: str, version: int):
    """The table's rows at ``version``: a DataFrame over that snapshot's files, listed once
    (``DeltaLog.createDataFrame``). Read through the path (``versionAsOf``), Delta's
    planner strategy for deletion vectors asks the file index for the files each time a
    query that holds it is planned, a Spark job on the log's state each: six per
    executors' batch (about 0.1-0.2 s of the driver's each). Deletion vectors apply all
    the same (the strategy handles any Delta file index). The snapshot is the cached one
    when it is at ``version`` (no listing of the log); the frame is made in ``spark``'s
    session (Delta makes it in the thread's active one)."""
    from pyspark.sql import DataFrame

    log_ = _jvm_log(spark, path)
    nothing = none(spark)
    snapshot = log_.getSnapshotAt(int(version), nothing, nothing, False)
    files = converters(spark).asScala(snapshot.allFiles().collectAsList()).toSeq()
    with active_session(spark):
        frame = log_.createDataFrame(snapshot, files, False, nothing)
    return DataFrame(frame, spark)


@contextmanager
def active_session(spark) -> Iterator[None]:
    """Make ``spark`` the JVM thread's active session for the block, then restore the one
    before: Delta makes frames, and its transactions read their settings (a commit's
    userMetadata among them), in the thread's active session, which may be another store's
    (``DeltaStore.for_thread``)."""
    sessions = java_class(spark, "org.apache.spark.sql.classic.SparkSession")
    active = sessions.getActiveSession()
    sessions.setActiveSession(spark._jsparkSession)
    try:
        yield
    finally:
        if active.isDefined():
            sessions.setActiveSession(active.get())
        else:
            sessions.clearActiveSession()


def position(spark, path: str) -> tuple[int, str]:
    """The table's current version and Delta table id, from one look at the log (a table
    recreated at the same path has another id and starts its versions again)."""
    snapshot = _updated(spark, path)
    return int(snapshot.version()), str(snapshot.metadata().id())


def identity(spark, path: str) -> tuple[int, str, dict[str, str]]:
    """``position`` and ``properties`` from one look at the log (a commit's checks: which
    table, and its fence)."""
    snapshot = _updated(spark, path)
    version = int(snapshot.version())
    if version < 0:
        return version, "", {}
    return version, str(snapshot.metadata().id()), dict(
        converters(spark).asJava(snapshot.metadata().configuration()))


def smallest_minimum(spark, path: str, column: str) -> tuple[int, int | None, bool]:
    """From the newest snapshot's file statistics, no data read: its version, the
    smallest ``minValues`` of ``column`` over its files (``None``: no file has one), and
    whether that covers every file that may hold a non-null value (a file written without
    statistics does not: its values are unknown).

    Statistics are of a file as written: rows a deletion vector removed since still count,
    so the value is a lower bound of the column's minimum, not the minimum."""
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    snapshot = _updated(spark, path)
    files = DataFrame(snapshot.allFiles().toDF(), spark)

    def stat(name: str):
        return F.get_json_object("stats", f"$.{name}").cast("bigint")

    minimum = stat(f"minValues.{column}")
    all_null = stat(f"nullCount.{column}") == stat("numRecords")
    row = files.select(
        F.min(minimum).alias("low"),
        F.count(F.when(minimum.isNull() & ~F.coalesce(all_null, F.lit(False)), 1))
        .alias("unknown")).first()
    return int(snapshot.version()), row["low"], row["unknown"] == 0


def latest_version(spark, path: str) -> int:
    """The table's current version, commits of other processes included.

    ``DeltaLog.update`` lists ``_delta_log`` and loads the newest snapshot: a few ms and no
    Spark job, where ``history(1)`` runs a job (~0.2 s). Never ``unsafeVolatileSnapshot``:
    it can be stale.
    """
    return int(_updated(spark, path).version())


def warm_snapshot(spark, path: str) -> None:
    """Compute the newest snapshot's state (the log replay from the last checkpoint, a Spark
    job) so the next write or read of the table finds it cached.

    Every write needs it first (MERGE's file listing and its txn check), and a new version
    starts with it uncomputed. Measured on a 1M-key store (``tests.bench.store_bench``,
    2-record batches): done beforehand it costs ~0.5 s and takes ~0.7 s off the next MERGE,
    so done while the caller publishes or waits for the next trigger it is saved.
    """
    _updated(spark, path).numOfFiles()


#: When the engine writes the next checkpoint, in the background (Delta's own, inside the
#: commit that reaches ``delta.checkpointInterval``, is kept rare: ``ttl.store.layout``).
#: Delta's default is every 10 commits. A checkpoint rewrites the table's whole state,
#: and on 2 cores the batch beside it took 0.4-0.9 s longer: with a 1 s trigger, every
#: tenth batch, the trickle's p99. Small commits (a trickle's are 1.4 KB) are replayed
#: cheaply, so the log may hold up to ``CHECKPOINT_MAX_COMMITS`` of them; once the commits
#: since the last checkpoint hold ``CHECKPOINT_LOG_BYTES`` (ten of 26 KB or more, as large
#: update batches write), Delta's ten stand. A snapshot then replays at most about that
#: much log, or ten larger commits as before, in at most 99 files.
CHECKPOINT_MIN_COMMITS = 10
CHECKPOINT_MAX_COMMITS = 100
CHECKPOINT_LOG_BYTES = 256 * 1024


def checkpoint_due(commits: int, log_bytes: Callable[[], int]) -> bool:
    """Whether ``commits`` commits after the last checkpoint call for the next one;
    ``log_bytes`` (their commit files' total size) is only asked between the bounds."""
    if commits < CHECKPOINT_MIN_COMMITS:
        return False
    return commits >= CHECKPOINT_MAX_COMMITS or log_bytes() >= CHECKPOINT_LOG_BYTES


def _log_bytes(snapshot) -> int:
    """The size of the commit files after ``snapshot``'s checkpoint (its log segment's
    listing, already made: no I/O; Delta reports the same figure as
    ``totalCommitsSizeSinceLastCheckpoint``)."""
    return int(snapshot.deltaFileSizeInBytes())


def checkpoint_if_due(spark, path: str) -> int | None:
    """Write a checkpoint of the newest version (and clean up expired log files, as Delta's
    own checkpoint does) when one is due (``checkpoint_due``); returns the version
    checkpointed, or ``None``. Any writer may checkpoint: a checkpoint is a copy of a
    version's state, written beside the commits, so it is safe while others commit."""
    snapshot = _updated(spark, path)
    version = int(snapshot.version())
    if not checkpoint_due(version - int(snapshot.checkpointProvider().version()),
                          lambda: _log_bytes(snapshot)):
        return None
    _jvm_log(spark, path).checkpoint(snapshot, none(spark))
    # Delta logs a failed checkpoint and goes on: only the log says whether it was written.
    if int(_updated(spark, path).checkpointProvider().version()) < version:
        log.warning("the checkpoint of %s at version %d was not written (Delta logged why)",
                    path, version)
        return None
    return version


def commit_file_mtime_ms(spark, path: str, version: int) -> int | None:
    """When ``version``'s commit file was last written (epoch ms; ``None``: the log no
    longer holds it): the time Delta's clean-up of the log judges a file's age by."""
    log_ = _jvm_log(spark, path)
    file = _file_names(spark).unsafeDeltaFile(log_.logPath(), int(version))
    fs = file.getFileSystem(log_.newDeltaHadoopConf())
    try:
        return int(fs.getFileStatus(file).getModificationTime())
    except Exception as exc:  # noqa: BLE001 - py4j wraps FileNotFoundException
        if "FileNotFoundException" in str(exc):
            return None
        raise


def clean_up_log(spark, path: str, retention_ms: int) -> None:
    """Delta's clean-up of the log (``MetadataCleanup.cleanUpExpiredLogs``, what it runs
    after a checkpoint with ``delta.logRetentionDuration``) with ``retention_ms``: the
    commit, checksum and checkpoint files written more than that long ago (the cut-off
    rounded down to the hour) and before a checkpoint that stays, so every version from
    that checkpoint on can still be read. Delta's code, not ours: it knows every kind of
    file a log holds (sidecars, compatibility checkpoints, unbackfilled commits)."""
    hour = java_class(spark, "org.apache.spark.sql.delta.TruncationGranularity").HOUR()
    # Option[Long] of a boxed Long: py4j would pass a small int as an Integer
    retention = java_class(spark, "scala.jdk.javaapi.OptionConverters").toScala(
        java_class(spark, "java.util.OptionalLong").of(int(retention_ms)))
    _jvm_log(spark, path).cleanUpExpiredLogs(_updated(spark, path), none(spark), retention,
                                             hour)


def commit_info(spark, path: str, version: int) -> Commit | None:
    """One commit read straight from its log file (no Spark job); ``None`` if the log no
    longer holds it (cleaned up after the log retention)."""
    log_ = _jvm_log(spark, path)
    try:
        file = _file_names(spark).unsafeDeltaFile(log_.logPath(), int(version))
        found = java_class(spark, "org.apache.spark.sql.delta.DeltaHistoryManager"
                           ).getCommitInfoOpt(log_.store(), file, log_.newDeltaHadoopConf())
    except Exception as exc:  # noqa: BLE001 - py4j wraps FileNotFoundException
        if "FileNotFoundException" in str(exc):
            return None
        raise
    if found.isEmpty():
        return None
    info = found.get()
    user = info.userMetadata()
    metrics = info.operationMetrics()
    read = info.readVersion()
    return Commit(int(version), info.timestamp().getTime() / 1000, info.operation(),
                  commit.decode(None if user.isEmpty() else user.get()),
                  {} if metrics.isEmpty() else dict(converters(spark).asJava(metrics.get())),
                  None if read.isEmpty() else int(read.get()))


def latest_commit(spark, path: str) -> Commit:
    """The table's current version with its metadata and metrics."""
    found = commit_info(spark, path, latest_version(spark, path))
    return found if found is not None else _commit(_history(spark, path, 1).first())


def commit_at(spark, path: str, version: int) -> Commit | None:
    """The commit that made ``version`` (``None`` if the log no longer has it)."""
    from pyspark.sql import functions as F

    latest = latest_version(spark, path)
    if version > latest:
        return None
    found = commit_info(spark, path, version)
    if found is not None:
        return found
    row = (_history(spark, path, latest - version + 1).where(F.col("version") == version)
           .first())
    return None if row is None else _commit(row)


#: Up to this many versions, ``engine_metadata`` reads commit files one by one (~2 ms each,
#: no Spark job); more, and one ``history()`` scan is cheaper.
DIRECT_READS = 50


def engine_metadata(spark, path: str, start: int, end: int) -> dict[int, dict]:
    """Per version in ``[start, end]``, the engine's metadata (``{}`` for others' commits)."""
    if end - start < DIRECT_READS:
        found = {v: commit_info(spark, path, v) for v in range(start, end + 1)}
        if all(c is not None for c in found.values()):
            return {v: c.metadata or {} for v, c in found.items()}
    latest = latest_version(spark, path)
    rows = (_history(spark, path, max(1, latest - start + 1))
            .where(f"version BETWEEN {int(start)} AND {int(end)}")
            .select("version", "userMetadata").collect())
    return {r.version: commit.decode(r.userMetadata) or {} for r in rows}


def _meta_filter(op: str | None, having: str | None, or_op: str | None):
    """The engine commits wanted, as a Python test of the metadata and as the same test
    of ``history()``'s rows: with ``op``; with a non-empty metadata key ``having``, or
    with op ``or_op``."""
    def wanted(meta: dict | None) -> bool:
        if meta is None or (op is not None and meta.get("op") != op):
            return False
        if having is None:
            return True
        value = meta.get(having)
        return (value is not None and value != {}) or (
            or_op is not None and meta.get("op") == or_op)

    cond = _meta("ttl") == "1"
    if op is not None:
        cond = cond & (_meta("op") == op)
    if having is not None:
        has = _meta(having).isNotNull() & (_meta(having) != "{}")
        cond = cond & ((has | (_meta("op") == or_op)) if or_op is not None else has)
    return wanted, cond


def newest_commits(spark, path: str, latest: int | None = None) -> Iterator[Commit]:
    """The newest ``DIRECT_READS`` commits (from ``latest``, default the table's version),
    newest first, read file by file (no Spark job); those the log no longer holds, or
    without commitInfo, are passed over."""
    latest = latest_version(spark, path) if latest is None else latest
    for version in range(latest, max(-1, latest - DIRECT_READS), -1):
        found = commit_info(spark, path, version)
        if found is not None:
            yield found


def _newest_first(spark, path: str, wanted: Callable[[dict | None], bool], cond,
                  limit: int, *, after: int = -1, latest: int | None = None
                  ) -> Iterator[Commit]:
    """Up to ``limit`` commits ``wanted`` (``cond`` in Spark) after version ``after``,
    newest first, from ``latest`` (default the table's version).

    The newest ``DIRECT_READS`` commit files are read one by one (no Spark job: a cost
    that does not grow with the log), and only a caller that reads on past them gets one
    history scan of the older ones."""
    from pyspark.sql import functions as F

    latest = latest_version(spark, path) if latest is None else latest
    given = 0
    oldest = max(-1, latest - DIRECT_READS)
    for found in newest_commits(spark, path, latest):
        if found.version <= after:
            return
        if wanted(found.metadata):
            yield found
            given += 1
            if given >= limit:
                return
    if oldest <= after:
        return
    for row in (_history_after(spark, path, after, latest)
                .where(cond & (F.col("version") <= oldest))
                .orderBy(F.col("version").desc()).limit(limit - given).collect()):
        yield _commit(row)


def _history_after(spark, path: str, after: int, latest: int):
    """The history of the commits after version ``after`` (every commit still in the log
    for -1), read up to ``latest``: ``history(n)`` reads only the newest n commit files, and
    is the newest n when it runs, so commits that landed since ``latest`` was read would
    push the oldest wanted ones out: some more are read, and the whole log if even that
    did not reach back to ``after``."""
    from pyspark.sql import functions as F

    if after < 0:
        return _history(spark, path)
    history = _history(spark, path, latest - after + DIRECT_READS)
    oldest = history.select(F.min("version")).first()[0]
    if oldest is not None and oldest > after + 1:
        history = _history(spark, path)
    return history.where(F.col("version") > after)


def last_engine_commit(spark, path: str, *, op: str | None = None,
                       having: str | None = None) -> Commit | None:
    """The latest engine commit with ``op`` and/or a non-empty metadata key ``having``."""
    return next(_newest_first(spark, path, *_meta_filter(op, having, None), limit=1), None)


def engine_commits_having(spark, path: str, having: str, *, or_op: str | None = None,
                          limit: int = 1000, after: int = -1,
                          latest: int | None = None) -> Iterator[Commit]:
    """The latest ``limit`` engine commits still in the log with a non-empty metadata key
    ``having`` (or with op ``or_op``), after version ``after`` and up to ``latest``, newest
    first: a start-up read, whose caller usually stops at the first (a batch records the
    whole input position)."""
    return _newest_first(spark, path, *_meta_filter(None, having, or_op), limit=limit,
                         after=after, latest=latest)


def recorded_position(spark, path: str, props: dict[str, str] | None = None,
                      latest: int | None = None) -> input_position.Recorded:
    """The input position the table holds at ``latest`` (default its version), by
    ``input_position.recorded``'s rule: the engine commits after the version its floor
    covers (``names.PROP_INPUT_POSITION``, written with the stream-time floor), then the
    floor; every commit still in the log when the table has no floor (made before it was
    kept, or copied from another table's log: a version past ``latest``). ``props``: the
    table's properties, read no later than ``latest``."""
    props = properties(spark, path) if props is None else props
    latest = latest_version(spark, path) if latest is None else latest
    kept = input_position.from_property(props.get(PROP_INPUT_POSITION))
    floor, after = kept if kept is not None and 0 <= kept[1] <= latest else (None, -1)
    commits = engine_commits_having(spark, path, "input_offsets", or_op=OP_RESTORE,
                                    after=after, latest=latest)
    return input_position.recorded((c.metadata or {} for c in commits),
                                   lambda: commit_at(spark, path, 0) is not None, floor)


def find_commit(spark, path: str, *, op: str, key: str, value: str,
                since: int) -> Commit | None:
    """The engine commit after version ``since`` with ``op`` whose metadata says
    ``key = value`` (e.g. a sweep by its id); ``None`` if Delta made no commit for it.
    Commit files are read directly, forward from ``since`` until one does not exist: an
    operation knows the version it started from, and no listing of the log is made (on a
    local file system a listing reads the whole ``_delta_log`` directory, whose files grow
    with the log's retention)."""
    version, latest = since + 1, None
    while True:
        found = commit_info(spark, path, version)
        if found is None:  # the end of the log, or a commit without commitInfo: list once
            latest = latest_version(spark, path) if latest is None else latest
            if version > latest:
                return None
        elif (found.metadata or {}).get("op") == op and found.metadata.get(key) == value:
            return found
        version += 1


def max_stream_time(spark, path: str, after: int | None = None,
                    latest: int | None = None) -> int | None:
    """The largest stream time recorded by the engine commits after version ``after`` (every
    commit still in the log when ``None``), up to version ``latest`` (default: the newest).

    Stream time is recovered as a maximum, never from one commit: a commit Delta rebased
    after a concurrent one keeps the metadata it was planned with, and the log forgets
    commits older than its retention. With ``after`` (``stream_time_floor``'s version) the
    read is bounded: the commit files after it, one by one when there are few, else the
    last ones through ``history(limit)``, which reads only those."""
    from pyspark.sql import functions as F

    if after is not None:
        latest = latest_version(spark, path) if latest is None else latest
        if latest <= after:
            return None
        if latest - after <= DIRECT_READS:
            found = [commit_info(spark, path, v) for v in range(after + 1, latest + 1)]
            times = [(c.metadata or {}).get("stream_time") for c in found if c is not None]
            times = [int(t) for t in times if t is not None]
            return max(times) if times else None
        history = _history_after(spark, path, after, latest)
    else:
        history = _history(spark, path)
    if latest is not None:
        history = history.where(F.col("version") <= latest)
    return (history.where(_meta("ttl") == "1")
            .select(F.max(_meta("stream_time").cast("bigint"))).first()[0])


def stream_time(spark, path: str, props: dict[str, str] | None = None,
                latest: int | None = None) -> int | None:
    """The table's stream time by ``clock.stream_time_floor``'s rule: its floor property
    and the commits after the version the floor covers (every commit still in the log when
    it covers none). ``props``: the table's properties, if already read; ``latest``: the
    version they were read at (default the newest)."""
    latest = latest_version(spark, path) if latest is None else latest
    floor, through = stream_time_floor(properties(spark, path) if props is None else props,
                                       latest)
    return recovered_stream_time(max_stream_time(spark, path, through, latest), floor)


def properties(spark, path: str) -> dict[str, str]:
    """The table's properties: its newest snapshot's metadata, read from the log (the
    version's checksum file when Delta wrote one) without a Spark job. ``DESCRIBE DETAIL``
    computed the table's size too, a log replay: 3-7 s on a cold JVM at every start-up."""
    return identity(spark, path)[2]  # none for no table (as DESCRIBE DETAIL said of a directory)


def file_count(spark, path: str) -> int:
    """How many data files the table's newest snapshot has (``DESCRIBE DETAIL``: a log
    replay, for an operator's command, not for a batch)."""
    return int(spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"])


# -- conflicts -----------------------------------------------------------------------------

def conflicts() -> tuple[type[BaseException], ...]:
    """Delta's conflict exceptions that ``retrying`` runs the whole operation again after:
    another commit won the race, and a re-run reads the table at the new version and plans
    everything again. Every one of Delta's seven (``io.delta.exceptions``; delta-spark's
    Python side raises the class of the Java exception's name):

    * ``ConcurrentAppendException``, ``ConcurrentDeleteReadException``,
      ``ConcurrentDeleteDeleteException``, ``ConcurrentWriteException``: files this operation
      read or removes were added or removed meanwhile (an operator's DELETE or UPDATE, a
      sweep, another writer's append): the re-run reads the rows as they are now.
      ``ConcurrentWriteException`` was missing, so such a conflict failed the operation.
    * ``MetadataChangedException``: the table's metadata changed (a property such as the
      TTL or the stream-time floor, the schema): the re-run runs the whole operation's
      checks again against the new metadata, which a batch relies on.
    * ``ProtocolChangedException``: the protocol changed (a feature enabled, two creators of
      one table): the re-run reads the new protocol, and one this client cannot write fails
      it with Delta's own error, not a conflict.
    * ``ConcurrentTransactionException``: another commit used the same idempotent
      transaction id: the re-run finds it committed and Delta skips the write, which is an
      idempotent batch's outcome.

    None is left out: the retries are bounded (``RETRIES``), so a conflict that keeps
    coming still fails. Their common base (``DeltaConcurrentModificationException``) is
    abstract in Delta: never raised as such."""
    from delta import exceptions as ex

    return (ex.ConcurrentAppendException, ex.ConcurrentDeleteReadException,
            ex.ConcurrentDeleteDeleteException, ex.ConcurrentWriteException,
            ex.ConcurrentTransactionException, ex.MetadataChangedException,
            ex.ProtocolChangedException)


def retrying(action: Callable[[], T], *, what: str, retries: int = RETRIES,
             backoff_s: float = BACKOFF_S) -> tuple[T, int]:
    """Run ``action`` again after a Delta conflict, with bounded exponential backoff;
    returns its result and the number of retries it took."""
    # Before the first run: importing delta.exceptions installs delta-spark's conversion of
    # the JVM's conflicts into these classes; a conflict that crossed py4j before any import
    # of delta stayed a bare Py4JJavaError, and was not retried.
    caught = conflicts()
    for attempt in range(retries + 1):
        try:
            return action(), attempt
        except caught as exc:
            if attempt == retries:
                raise
            log.warning("%s conflicted with a concurrent commit (%s); retry %d/%d", what,
                        type(exc).__name__, attempt + 1, retries)
            time.sleep(backoff_s * 2**attempt)
    raise AssertionError("unreachable")
