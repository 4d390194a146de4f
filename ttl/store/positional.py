"""A batch's replace and a sweep's delete made by ttl: the stored rows deleted by position.

Delta's own replace of a batch's keys (``replaceWhere``, or ``replaceUsing`` where the
files' statistics skip nothing) finds the rows to delete with Spark: file skipping on the
log's state, then a scan of the candidate files with their row indexes, a join with the
files' current deletion vectors, an aggregation per file, the vectors written, and two
joins that put the files' statistics back on the new file entries: about ten Spark jobs,
and the driver's planning between them, even for 20 rows (docs/performance.md, "What a
20-update batch's write runs"). Here the same commit is made with two small Spark jobs
(the touched files' entries from the snapshot's state, the insert) and the driver's own
reads, when the files that can hold the batch's keys have at most ``MAX_ROWS`` rows (the
driver reads their ``key_hash``, where Delta's scan runs in Spark's tasks):

1. the files that may hold a changed key, from the ``key_hash`` statistics the batch's
   lookup already read (delta-rs's add actions at the lookup's version);
2. in each, the row groups whose ``key_hash`` statistics may hold one, read with pyarrow:
   the physical row index of every row with a changed key's hash (and, unless the hashes
   tell the keys apart, one of the keys: so a row whose ``key_hash`` is not its own
   key's, written beside the engine, goes too when its hash is another changed key's,
   where Delta's ``replaceUsing``, matching pairs, would leave it beside the new row). A
   row a deletion vector already removed may be among them: deleting it again changes
   nothing;
3. in Delta's transaction at the lookup's version (so Delta's conflict checks apply to
   every commit after it, the whole table counted as read): each touched file's deletion
   vector, its old one (if any) and the new rows together, written with Delta's own
   writer; the file's entry replaced by one that carries it (``AddFile.removeRows``, which
   keeps the statistics and marks their bounds wide), or removed when no row is left; the
   upserts' rows written by the transaction (``writeFiles``); the batch's idempotent id;
   one commit.

The commit has the same actions as Delta's ``replaceWhere`` with deletion vectors: Delta's
change-data reader gives each removed row as a ``delete`` (the rows of the new vector that
the old one did not hold) and each new row as an ``insert``. The rows deleted are exactly
those ``replaceWhere`` with the same predicate deletes, and only they, however the files
are laid out: a file is skipped only by statistics that exclude every key's hash. The
model tests hold both paths to the reference model, and a test compares their tables and
change feeds (``tests/integration/test_store.py``). Measured
(``tests.bench.big_state --vs-delta-write``) in docs/performance.md.

A sweep at T (``ttl.eviction``) is made the same way, as Delta's ``DELETE WHERE expires_at
<= T`` would be: ``find_due`` reads the ``expires_at`` of the files and row groups whose
statistics reach T, and ``delete_by_position`` commits their due rows' deletion as a
``DELETE`` (no commit when none is left; ``tests/integration/test_eviction.py`` compares
the tables and change feeds with Delta's).

Used for a table on the local file system or on S3 (its files read with the lookup's
delta-rs storage options, through Arrow's S3 client) with deletion vectors enabled, no
column mapping (the files' column names are the table's) and ttl's jar on the classpath;
otherwise, or when the lookup read no statistics, the batch takes Delta's write (the
sweep, Delta's ``DELETE``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote, urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ttl import delta_log, delta_rs
from ttl.errors import PositionalUnsupported
from ttl.java import converters, java_class, loaded, none
from ttl.names import S3_SCHEMES, local_path
from ttl.store.lookup import HashSet, in_ranges, may_hold

log = logging.getLogger(__name__)

__all__ = ["MAX_ROWS", "delete_by_position", "find_due", "find_rows", "may_be_due",
           "replace_by_name", "replace_by_position", "rows_to_delete", "rows_to_read",
           "one_line", "supported", "writable"]


def supported(spark, path: str, version: int, files: pa.Table,
              options: dict[str, str] | None = None) -> bool:
    """Whether the table at ``version`` takes a replace by position: on the local file
    system, or on S3 with delta-rs's storage ``options`` (the lookup's), Delta's snapshot
    holding as many files as delta-rs's ``files`` (its add actions at ``version``), which
    the rows are looked for in, and ``writable``."""
    if local_path(path) is None and (options is None
                                     or urlparse(path).scheme not in S3_SCHEMES):
        return False
    snapshot = _writable_snapshot(spark, path, version)
    return snapshot is not None and int(snapshot.numOfFiles()) == files.num_rows


def writable(spark, path: str, version: int) -> bool:
    """Whether ttl can write the table's deletion vectors at ``version``, wherever Spark
    reads and writes it (the executors' replace by position, whose rows Spark's tasks
    found): ``_writable_snapshot``."""
    return _writable_snapshot(spark, path, version) is not None


def _writable_snapshot(spark, path: str, version: int):
    """Delta's snapshot at ``version`` when its deletion vectors are enabled and writable,
    it has no column mapping (the files' column names are the table's) and ttl's JVM class
    that writes the vectors is on the classpath (``helper``); else ``None``."""
    if helper(spark) is None:
        return None
    nothing = none(spark)
    snapshot = delta_log._jvm_log(spark, path).getSnapshotAt(int(version), nothing, nothing,
                                                            False)
    conf = snapshot.metadata().configuration()
    mapping = conf.get("delta.columnMapping.mode")
    if mapping.isDefined() and str(mapping.get()).lower() != "none":
        return None
    utils = getattr(java_class(spark, "org.apache.spark.sql.delta.commands.DeletionVectorUtils$"),
                    "MODULE$")
    return snapshot if utils.deletionVectorsWritable(snapshot, nothing, nothing) else None


def _column_index(metadata: pq.FileMetaData, name: str) -> int | None:
    row_group = metadata.row_group(0)
    for j in range(row_group.num_columns):
        if row_group.column(j).path_in_schema == name:
            return j
    return None


def _rows_by_group(parquet: pq.ParquetFile, column: str, reaches: Callable[[object], bool],
                   hits: Callable[[int], np.ndarray]) -> np.ndarray:
    """The physical row indexes (in the whole file) that ``hits`` finds in each row group
    (by its index) whose ``column`` statistics ``reaches`` says may hold one (given a
    statistics object with a minimum and maximum), or that has none; the other row groups
    are not read."""
    metadata = parquet.metadata
    index = _column_index(metadata, column)
    if index is None:
        raise PositionalUnsupported(f"no {column} column")
    found, offset = [], 0
    for i in range(metadata.num_row_groups):
        group = metadata.row_group(i)
        stats = group.column(index).statistics
        if stats is None or not stats.has_min_max or reaches(stats):
            hit = hits(i)
            if hit.size:
                found.append(hit.astype(np.int64) + offset)
        offset += group.num_rows
    return np.concatenate(found) if found else np.empty(0, np.int64)


def _rows_in_file(parquet: pq.ParquetFile, hashes: HashSet,
                  keys: pa.Array | None) -> np.ndarray:
    """The physical row indexes of ``parquet``'s rows whose ``key_hash`` is one of
    ``hashes`` (and, with ``keys``, whose key is one of them: read only in a row group
    with such a hash), reading only the row groups whose ``key_hash`` statistics may hold
    one (on S3: a read of the footer, then one of each such row group's columns)."""

    def hits(group: int) -> np.ndarray:
        hit = hashes.rows(parquet.read_row_group(group, columns=["key_hash"])["key_hash"])
        if keys is not None and hit.size:
            stored = parquet.read_row_group(group, columns=["key"])["key"]
            held = pc.is_in(stored.take(pa.array(hit)), value_set=keys)
            hit = hit[pc.fill_null(held, False).to_numpy(zero_copy_only=False)]
        return hit

    return _rows_by_group(parquet, "key_hash", lambda stats: bool(in_ranges(
        hashes.sorted, np.array([stats.min]), np.array([stats.max]))[0]), hits)


def _rows_due(parquet: pq.ParquetFile, t: int) -> np.ndarray:
    """The physical row indexes of ``parquet``'s rows with ``expires_at <= t`` (not null:
    never expires), reading only the row groups whose ``expires_at`` statistics may hold
    one."""

    def hits(group: int) -> np.ndarray:
        values = parquet.read_row_group(group, columns=["expires_at"])["expires_at"]
        due = pc.fill_null(pc.less_equal(values, pa.scalar(t, pa.int64())), False)
        return np.flatnonzero(due.to_numpy(zero_copy_only=False))

    return _rows_by_group(parquet, "expires_at", lambda stats: stats.min <= t, hits)


def _file(root: str, path: str, remote: bool) -> str:
    """The file of an add action's ``path``, relative to the table (URL-encoded in Delta's
    log) or absolute (a URI): a local path, or (``remote``) S3's ``bucket/key``."""
    parsed = urlparse(path)
    if parsed.scheme:
        return unquote(f"{parsed.netloc}{parsed.path}" if remote else parsed.path)
    return f"{root.rstrip('/')}/{unquote(path)}"


def rows_to_read(files: pa.Table, read: np.ndarray) -> int:
    """How many rows the ``files`` that ``read`` marks have (a file without a row count
    counts as unknown: all of the table's rows), whose ``key_hash`` (``find_rows``) or
    ``expires_at`` (``find_due``) is read, less the row groups their statistics skip."""
    if not files.num_rows:
        return 0
    counts = (pc.fill_null(files["num_records"], -1).to_numpy()
              if "num_records" in files.column_names else np.full(files.num_rows, -1))
    held = counts[read]
    if (held < 0).any():
        return int(max(counts.clip(min=0).sum(), 1) * 2)  # unknown: as if more than all
    return int(held.sum())


#: Rows are deleted by position when the files that can hold them (by their statistics:
#: every file of a table whose files each span the whole ``key_hash`` range, for a batch
#: of many keys or a sweep on that layout) have at most this many rows, which the driver
#: reads one column of; past it, Delta's write or ``DELETE``, whose scan runs in Spark's
#: tasks (on a cluster, spread over the executors). Measured (2026-11-30): the driver
#: reads the ``key_hash`` of 10M rows in about 0.1 s here.
MAX_ROWS = 100_000_000


def rows_to_delete(spark, path: str, version: int, files: pa.Table, read: np.ndarray,
                   find: Callable[[], dict[str, np.ndarray]],
                   options: dict[str, str] | None, instead: str) -> dict | None:
    """``find()`` (``find_rows``, ``find_due``): the rows a delete by position of the table
    at ``version`` would delete in ``files`` (delta-rs's add actions at it), when the table
    takes one (``supported``) and the files ``read`` marks have at most ``MAX_ROWS`` rows;
    else ``None``, ``instead`` (Delta's write, its DELETE) being the caller's to make: a
    failure to read the files is one log line, and nothing has been written."""
    try:
        if (not supported(spark, path, version, files, options)
                or rows_to_read(files, read) > MAX_ROWS):
            return None
        return find()
    except PositionalUnsupported as exc:
        log.info("%s: %s instead of ttl's by position: %s", path, instead, exc)
    except Exception as exc:  # noqa: BLE001 - nothing written yet: Delta's is safe
        log.warning("%s: %s instead of ttl's by position, which failed to read the files: "
                    "%s: %s", path, instead, type(exc).__name__, exc)
    return None


#: ``find_rows`` reads this many files at a time (on S3 each is a footer read and ranged
#: reads, one after another; Arrow releases the GIL while it reads and decodes).
READERS = 8


def find_rows(path: str, files: pa.Table, hashes: np.ndarray, keys: pa.Array | None,
              options: dict[str, str] | None = None,
              read: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Per file of ``files`` (delta-rs's flattened add actions of the table at ``path``),
    the physical row indexes of its rows with one of ``hashes`` (and one of ``keys``,
    unless ``None``): files whose ``key_hash`` statistics hold none of them are not
    opened; a file without them is. A table on S3 is read with delta-rs's storage
    ``options``. Raises ``PositionalUnsupported`` when a file with such a row has no row
    count in its statistics (written without them): its entry with a deletion vector
    needs one, which Delta's own write reads from the file. ``read``: ``may_hold`` of
    the hashes, when the caller has it."""
    matcher = HashSet(pa.array(hashes, pa.int64()))
    return _find(path, files, may_hold(files, matcher.sorted) if read is None else read,
                 options,
                 lambda parquet: _rows_in_file(parquet, matcher, keys))


def may_be_due(files: pa.Table, t: int) -> np.ndarray:
    """For each of ``files`` (delta-rs's flattened add actions), whether its
    ``expires_at`` statistics say it may hold an entry with ``expires_at <= t``: its
    minimum is at most ``t``, or it has no minimum and not only nulls (no statistics)."""
    if "min.expires_at" not in files.column_names:
        return np.ones(files.num_rows, bool)
    low = files["min.expires_at"]
    known = pc.is_valid(low).to_numpy(zero_copy_only=False)
    due = pc.fill_null(pc.less_equal(low, pa.scalar(t, pa.int64())), False)
    nulls = (pc.fill_null(pc.equal(files["null_count.expires_at"], files["num_records"]), False)
             if {"null_count.expires_at", "num_records"} <= set(files.column_names)
             else pa.array(np.zeros(files.num_rows, bool)))
    return due.to_numpy(zero_copy_only=False) | (~known & ~nulls.to_numpy(zero_copy_only=False))


def find_due(path: str, files: pa.Table, t: int,
             options: dict[str, str] | None = None) -> dict[str, np.ndarray]:
    """Per file of ``files``, the physical row indexes of its rows with ``expires_at <=
    t``, reading only the files (``may_be_due``) and row groups whose ``expires_at``
    statistics may hold one: the rows ``DELETE ... WHERE expires_at <= t`` deletes (a row
    a deletion vector already removed may be among them). As ``find_rows``."""
    return _find(path, files, may_be_due(files, t), options, lambda parquet: _rows_due(parquet, t))


#: At most this many rows are deleted by position in one commit: their indexes are held in
#: the driver and handed to the JVM as one array (8 bytes a row on each side, and the copy
#: Py4J makes), so a sweep that finds more (a catch-up after an outage, a shorter TTL)
#: leaves them to Delta's ``DELETE``, whose tasks hold them.
MAX_DELETES = 10_000_000


def _find(path: str, files: pa.Table, read: np.ndarray, options: dict[str, str] | None,
          rows_of: Callable[[pq.ParquetFile], np.ndarray]) -> dict[str, np.ndarray]:
    """``rows_of`` each of ``files`` that ``read`` marks, ``READERS`` at a time; the files
    with rows, by their paths in ``files``. Raises ``PositionalUnsupported`` past
    ``MAX_DELETES`` rows."""
    root, filesystem = local_path(path), None
    if root is None:
        parsed = urlparse(path)
        root, filesystem = f"{parsed.netloc}{parsed.path}", delta_rs.s3_filesystem(options)
    counted = dict(zip(files["path"].to_pylist(),
                       (pc.is_valid(files["num_records"]).to_numpy(zero_copy_only=False)
                        if "num_records" in files.column_names
                        else np.zeros(files.num_rows, bool)), strict=True))
    names = [files["path"][int(i)].as_py() for i in np.flatnonzero(read)]

    def rows(name: str) -> np.ndarray:
        file = _file(root, name, filesystem is not None)
        parquet = pq.ParquetFile(file if filesystem is None
                                 else filesystem.open_input_file(file))
        if parquet.metadata.num_row_groups == 0:
            return np.empty(0, np.int64)
        try:
            return rows_of(parquet)
        except PositionalUnsupported as exc:
            raise PositionalUnsupported(f"{name}: {exc}") from None

    with ThreadPoolExecutor(READERS) as pool:
        touched, total = {}, 0
        for name, found in zip(names, pool.map(rows, names), strict=True):
            if found.size:
                if not counted[name]:
                    raise PositionalUnsupported(f"{name} has no row count in its statistics")
                touched[name] = found
                total += found.size
                if total > MAX_DELETES:
                    raise PositionalUnsupported(f"more than {MAX_DELETES:,} rows to delete")
    return touched


def replace_by_position(spark, path: str, version: int, touched: dict[str, np.ndarray],
                        rows, predicate: str | None, txn: tuple[str, int] | None,
                        using: str | None = None) -> bool:
    """Commit, on the table at ``version``: ``touched``'s rows (``find_rows``) deleted and
    ``rows`` (a DataFrame in the table's columns; ``None``: none) inserted, with the
    idempotent ``txn``; the commit's userMetadata from the session
    (``commit.commit_settings``). ``predicate`` is
    recorded as the write's, as ``replaceWhere`` records it; or ``using``, the columns
    rows were matched by, as ``replaceUsing`` records them. Returns False, committing
    nothing, when ``txn`` was already committed (a replay). Run in ``spark`` as the
    thread's active session: Delta's transaction reads its settings there."""
    return _commit(spark, path, version, _by_path(spark, touched), rows, txn,
                   _write_operation(spark, predicate, using)) is not None


def replace_by_name(spark, path: str, version: int, count: int,
                    positions: Callable[[], pa.Table], rows, using: str,
                    txn: tuple[str, int] | None) -> bool:
    """``replace_by_position`` of the ``count`` rows the executors' fold named
    (``positions()``: ``stored_file``, its file's name hash, and ``stored_row``, read only
    once the batch id is known not to be committed; ``ttl.store.distributed``), recorded as
    matched by the ``using`` columns. Raises ``PositionalUnsupported``, with nothing
    committed, past ``MAX_DELETES`` rows or when a name hash names no file of the version,
    or two."""
    def deletes(log_, snapshot, transaction, now: int, actions) -> tuple[int, int]:
        if count > MAX_DELETES:
            raise PositionalUnsupported(f"more than {MAX_DELETES:,} rows to delete")
        named = positions()
        files = named["stored_file"].to_numpy()
        at = named["stored_row"].to_numpy()
        order = np.lexsort((at, files))
        files, at = files[order], at[order]
        starts = np.flatnonzero(np.r_[True, files[1:] != files[:-1]])
        ends = np.r_[starts[1:], files.size]
        counts = helper(spark).deleteByName(
            log_, transaction, snapshot, _java_array(spark, files[starts], "long"),
            _java_array(spark, at, "long"), _java_array(spark, ends, "int"), now, actions)
        return int(counts[0]), int(counts[1])
    return _commit(spark, path, version, deletes if count else None, rows, txn,
                   _write_operation(spark, None, using)) is not None


def _write_operation(spark, predicate: str | None, using: str | None):
    """Delta's ``WRITE`` operation of an overwrite, as a replace records it: its
    ``predicate`` (``replaceWhere``'s) or the columns it matched by (``replaceUsing``'s)."""
    option, nothing = java_class(spark, "scala.Option"), none(spark)
    return java_class(spark, "org.apache.spark.sql.delta.DeltaOperations$Write")(
        java_class(spark, "org.apache.spark.sql.SaveMode").Overwrite, nothing,
        option.apply(predicate), nothing, nothing, nothing, nothing, nothing,
        option.apply(using))


def delete_by_position(spark, path: str, version: int, touched: dict[str, np.ndarray],
                       predicate: str) -> int | None:
    """Commit, on the table at ``version``, ``touched``'s rows (``find_due``) deleted, as
    Delta's ``DELETE ... WHERE predicate`` would (its operation, ``DELETE``, with the
    predicate and ``numDeletedRows`` in the log); the commit's userMetadata from the
    session. Returns how many rows it deleted; ``None``, committing nothing, when none was
    left to delete (as Delta's DELETE, which commits only when a row matches)."""
    parsed = spark._jsparkSession.sessionState().sqlParser().parseExpression(predicate)
    condition = converters(spark).asScala(
        java_class(spark, "java.util.Collections").singletonList(parsed)).toSeq()
    operation = java_class(spark, "org.apache.spark.sql.delta.DeltaOperations$Delete")(
        condition)
    return _commit(spark, path, version, _by_path(spark, touched), None, None, operation,
                   required=False)


def _by_path(spark, touched: dict[str, np.ndarray]) -> Callable | None:
    """``_commit``'s ``deletes`` of ``touched``'s rows (by the files' paths), or ``None``
    when there are none."""
    if not touched:
        return None
    return lambda log_, snapshot, transaction, now, actions: _deletion_vectors(
        spark, log_, snapshot, transaction, touched, now, actions)


def _commit(spark, path: str, version: int, deletes: Callable | None, rows,
            txn: tuple[str, int] | None, operation, required: bool = True) -> int | None:
    """Commit ``operation`` on the table at ``version``: the rows ``deletes`` names deleted
    (``deletes(log, snapshot, transaction, now, actions)`` adds the files' new entries to
    ``actions`` and returns how many rows and whole files it deleted), ``rows``
    inserted, with ``txn``; how many rows it deleted, or ``None`` when it committed
    nothing (``txn`` committed already; unless ``required``, no row to delete or insert).
    Run in ``spark`` as the thread's active session: Delta's transaction reads its
    settings there."""
    with delta_log.active_session(spark):
        option, nothing = java_class(spark, "scala.Option"), none(spark)
        seq = converters(spark)
        log_ = delta_log._jvm_log(spark, path)
        snapshot = log_.getSnapshotAt(int(version), nothing, nothing, False)
        transaction = log_.startTransaction(nothing, option.apply(snapshot))
        if txn is not None and transaction.txnVersion(txn[0]) >= txn[1]:
            return None
        transaction.readWholeTable()
        actions = java_class(spark, "java.util.ArrayList")()
        now = int(time.time() * 1000)
        if txn is not None:
            # A Python int this large reaches the JVM as a Long (Option[Long] needs one).
            actions.add(java_class(spark, "org.apache.spark.sql.delta.actions.SetTransaction")(
                txn[0], int(txn[1]), option.apply(now)))
        try:  # nothing is committed before ``commit``: Delta's write is still safe
            deleted, removed = (deletes(log_, snapshot, transaction, now, actions)
                                if deletes is not None else (0, 0))
            if not required and rows is None and not deleted:
                return None
            # Delta's DELETE reads both when it reports its metrics (without them its
            # commit fails); the batch line logs ``numDeletedRows``.
            _register_metrics(spark, transaction, {"numDeletedRows": deleted,
                                                   "numRemovedFiles": removed,
                                                   "numAddedChangeFiles": 0})
            if rows is not None:
                for action in seq.asJava(transaction.writeFiles(rows._jdf)):
                    actions.add(action)
        except PositionalUnsupported:
            raise
        except Exception as exc:  # noqa: BLE001 - one line for the caller's fallback
            raise PositionalUnsupported(one_line(exc)) from exc
        transaction.commit(seq.asScala(actions).toSeq(), operation)
        return deleted


def one_line(exc: Exception) -> str:
    """The error's class and the first line of its message; for a JVM error that crossed
    Py4J unconverted, the Java exception's own (Py4J's first line says only which call
    failed)."""
    java = getattr(exc, "java_exception", None)
    text = str(java.toString()) if java is not None else str(exc)
    lines = text.strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300] if lines else '(no message)'}"


def _java_array(spark, values: np.ndarray, kind: str):
    """``values`` as a JVM ``long[]`` or ``int[]`` (``kind``), handed over as one byte
    array (a call per value would cost a round trip to the JVM each)."""
    array = spark.sparkContext._gateway.new_array(java_class(spark, kind), len(values))
    dtype, view = ("<i8", "asLongBuffer") if kind == "long" else ("<i4", "asIntBuffer")
    buffer = (java_class(spark, "java.nio.ByteBuffer").wrap(values.astype(dtype).tobytes())
              .order(java_class(spark, "java.nio.ByteOrder").LITTLE_ENDIAN))
    getattr(buffer, view)().get(array)
    return array


def _register_metrics(spark, transaction, values: dict[str, int]) -> None:
    """Give the commit's ``operationMetrics`` these values, as Delta's own writes do (the
    batch line logs ``numDeletedRows``)."""
    metrics = getattr(java_class(spark, "scala.collection.immutable.Map$"), "MODULE$").empty()
    sql_metrics = java_class(spark, "org.apache.spark.sql.execution.metric.SQLMetrics")
    for name, value in values.items():
        metric = sql_metrics.createMetric(spark.sparkContext._jsc.sc(), name)
        metric.set(int(value))
        metrics = metrics.updated(name, metric)
    transaction.registerSQLMetrics(spark._jsparkSession, metrics)


def helper(spark):
    """ttl's JVM class that writes the deletion vectors (``ttl/jvm/PositionalDeletes.java``,
    in the jar ``ttl setup`` builds with a JDK), or ``None`` when it is not on the
    classpath."""
    global _WARNED_NO_JAR
    found = loaded(spark, "ttl.delta.PositionalDeletes")
    if found is not None:
        return found
    if not _WARNED_NO_JAR:
        log.warning("ttl's jar is not on the classpath (`ttl setup` builds it with a JDK): "
                    "batches and sweeps take Delta's write and DELETE, slower")
        _WARNED_NO_JAR = True
    return None


_WARNED_NO_JAR = False  # per process: one JVM, one classpath


def _deletion_vectors(spark, log_, snapshot, transaction, touched: dict[str, np.ndarray],
                      now: int, actions) -> tuple[int, int]:
    """Add to ``actions`` each touched file's entry with its new deletion vector (its old
    rows and ``touched``'s), and the removal of its old entry, written in one vector file
    (``PositionalDeletes.java``: one call into the JVM for all the files); returns how many
    rows it deleted that were not deleted before, and how many files it removed whole."""
    deletes = helper(spark)
    if deletes is None:
        raise PositionalUnsupported("ttl's JVM classes are not on the classpath")
    wanted = {unquote(p): p for p in touched}  # either reader's paths, encoded or not
    names = set(touched) | set(wanted) | {quote(p, safe="/:") for p in wanted}
    olds = deletes.entries(snapshot, "\n".join(sorted(names)))
    paths = [unquote(p) for p in str(deletes.paths(olds)).split("\n")] if olds.size() else []
    missing = set(wanted) - set(paths)
    if missing or len(paths) != len(wanted):
        raise PositionalUnsupported(f"files {sorted(missing)[:3]} of version "
                                    f"{snapshot.version()} are not in Delta's snapshot as "
                                    f"delta-rs listed them")
    uncounted = deletes.uncounted(olds)
    if uncounted is not None:  # find_rows checked delta-rs's row counts; this is Delta's
        raise PositionalUnsupported(f"{uncounted} has no row count in Delta's snapshot")
    transaction.trackFilesRead(converters(spark).asScala(olds).toSeq())
    rows = [touched[wanted[p]] for p in paths]
    ends = np.cumsum([len(r) for r in rows])
    counts = deletes.delete(log_, transaction, olds,
                            _java_array(spark, np.concatenate(rows), "long"),
                            _java_array(spark, ends, "int"), now, actions)
    return int(counts[0]), int(counts[1])
