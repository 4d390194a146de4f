"""The batch on the executors: the same fold, where the records are (docs/scaling.md).

The driver path (``ttl.store.write``) takes a micro-batch as one Arrow table in the driver:
the right trade in local mode, where driver and executors share the machine, and the
ceiling on a cluster, where the driver would carry every record. Here the batch's records
stay on the executors:

1. the input DataFrame (Spark's Kafka rows) gets its keys' ``key_hash`` on the executors,
   and is persisted there while the batch lasts (``held_inputs``: Kafka is read once);
2. the stored rows of the batch's keys are the table's narrow columns, at the version the
   write starts from, filtered by a Bloom filter of the batch's keys' hashes, built on the
   executors (``KeyFilter.java``; without ttl's jar, a join with the distinct hashes,
   which Spark broadcasts from its driver). The fold keeps those of its own input's
   hashes (a row of another key with the same hash too: the fold leaves it, and the
   partition says so); for a replace by position, each with its file's name hash and its
   row index in the file;
3. input and stored rows, tagged, are hash-partitioned by ``key_hash`` (a key's records and
   its stored row meet in one partition) and each partition is folded by
   ``ttl.store.fold.fold_table``, the driver path's own code: the fold is per key, so
   folding the partitions apart is folding the batch (the same generated-sequence tests
   hold both paths to the reference model). Out come the changes, the dead letters and
   one row of figures per partition (counts, largest timestamp, earliest expiry, the
   input offsets it saw);
4. that result is persisted (computed once, kept in the executors' block managers): the
   dead letters, the expired-keys list and the commit read it there;
5. the driver sums the figures and makes the commit: an append, a MERGE, an empty commit,
   as on the driver path, or a replace. The replace is ttl's by position where the table
   takes it (``positional.writable``): the fold named the stored rows it replaces or
   removes (their files and row indexes), the driver reads those pairs (16 bytes a row)
   and writes the files' deletion vectors, and the upserts' rows are written from the
   executors, in one Delta transaction at the version the fold read. Else Delta's
   replace, which scans the table again and joins it with the batch's changed keys,
   broadcast from the driver.

What reaches the driver: one row of figures per partition, the positions of the stored
rows a replace deletes, the expired-on-arrival keys
when there are at most ``write.EXPIRED_KEYS_INLINE`` of them (they go in the commit's
metadata), and, for the stream's publisher, either the change rows (one per changed key:
what the changelog gets), collected once the commit is made, or nothing: they stay held
on the executors and are published from there (``HeldChanges``, docs/scaling.md).
"""

from __future__ import annotations

import functools
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ttl import delta_log
from ttl.config import key_filter_fpp, switch
from ttl.errors import ConfigError, PositionalUnsupported
from ttl.java import java_class, loaded
from ttl.model import Counts, Semantics
from ttl.names import EXPIRED_KEYS_SUFFIX, KEY_FILTER_ENABLED, KEY_FILTER_FPP, sibling
from ttl.phases import BatchPhases
from ttl.store import positional
from ttl.store import write as driver_write
from ttl.store.executor_fold import (
    FIGURES,
    INPUT,
    OUTPUT_DDL,
    POSITION,
    POSITION_COLUMNS,
    REJECT,
    STORED,
    fold_partition,
)
from ttl.store.fold import INPUT_COLUMNS, STORED_COLUMNS
from ttl.store.write import (
    EXPIRED_KEYS_ASIDE,
    MATCH_COLUMNS,
    WriteResult,
    append_dead_letters,
    append_expired_keys,
    append_rows,
    at_stable_version,
    commit_write,
    empty_commit,
    final_metadata,
    merge_into,
    replace_rows,
    write_kind,
)

__all__ = ["HeldChanges", "held_inputs", "write_frame"]

log = logging.getLogger(__name__)


@dataclass
class Figures:
    """What the partitions' folds say about the batch, summed on the driver."""

    counts: Counts = field(default_factory=Counts)
    max_ts: int | None = None
    earliest_expiry: int | None = None
    upserted: int = 0
    deleted: int = 0
    expired: int = 0
    stored: int = 0  # stored rows of the batch's keys' hashes the partitions kept
    rejects: int = 0
    first_offsets: dict[str, int] = field(default_factory=dict)
    next_offsets: dict[str, int] = field(default_factory=dict)
    #: The keys expired on arrival (hex), while every partition named its own.
    expired_keys: list[str] | None = field(default_factory=list)
    #: Whether ``key_hash`` alone tells the batch's keys' stored rows apart, in every
    #: partition (``layout.hash_identifies_keys``; a hash's rows all meet in one).
    by_hash: bool = True
    #: How many stored rows the commit deletes, named by ``position`` rows; ``None`` when
    #: the stored rows came without their positions (``fold_frame``'s ``positions``).
    positions: int | None = 0

    def add(self, part: dict) -> None:
        self.counts.add(Counts(**{**part["counts"], "rejected": Counter(
            part["counts"]["rejected"])}))
        for name in ("upserted", "deleted", "expired", "stored", "rejects"):
            setattr(self, name, getattr(self, name) + part[name])
        self.max_ts = _extreme(max, self.max_ts, part["max_ts"])
        self.earliest_expiry = _extreme(min, self.earliest_expiry, part["earliest_expiry"])
        for p, o in part["first_offsets"].items():
            self.first_offsets[p] = min(o, self.first_offsets.get(p, o))
        for p, o in part["next_offsets"].items():
            self.next_offsets[p] = max(o, self.next_offsets.get(p, o))
        self.by_hash = self.by_hash and part["by_hash"]
        named_rows = part.get("positions")
        self.positions = (None if named_rows is None or self.positions is None
                          else self.positions + named_rows)
        named = part.get("expired_keys")
        self.expired_keys = None if named is None or self.expired_keys is None else [
            *self.expired_keys, *named]


def _extreme(pick, a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else pick(a, b)


@dataclass
class Spread:
    """A batch folded on the executors: the result (persisted) and its figures."""

    out: object  # DataFrame in ``OUTPUT_DDL``
    figures: Figures

    def changes(self):
        from pyspark.sql import functions as F

        return (self.out.where(F.col("kind").isin("upsert", "delete"))
                .select("kind", "key", "value", "ts", "headers", "expires_at", "record_ttl",
                        "removal_op")
                .withColumn("key_hash", F.xxhash64("key")))

    def table_rows(self):
        """The upserts as the store table's rows (its columns, in its order; ``updated_at``
        is the batch's wall clock, which the fold wrote on each row)."""
        from pyspark.sql import functions as F

        return (self.out.where(F.col("kind") == "upsert")
                .select("key", "value", "ts", "headers", "expires_at",
                        F.col("written_at").alias("updated_at"),
                        F.xxhash64("key").alias("key_hash"), "record_ttl"))

    def rejects(self):
        from pyspark.sql import functions as F

        return (self.out.where(F.col("kind") == REJECT)
                .select("key", "value", "timestamp", "headers", "source_partition",
                        "source_offset", "reason", "detail",
                        F.col("written_at").alias("rejected_at")))

    def positions(self):
        """The stored rows the commit deletes: ``stored_file`` (its file's name hash) and
        ``stored_row`` (its physical row index there)."""
        from pyspark.sql import functions as F

        return self.out.where(F.col("kind") == POSITION).select(*POSITION_COLUMNS)

    def expired_keys(self):
        from pyspark.sql import functions as F

        return (self.out.where((F.col("kind") == "delete") & (F.col("removal_op") == "expire"))
                .select("key"))


def tagged_inputs(records):
    """The input records (a DataFrame with the Kafka source's columns, ``timestamp`` in
    ms) as the fold's input rows: tagged, with their keys' ``key_hash``."""
    from pyspark.sql import functions as F

    return records.select(F.lit(INPUT).alias("tag"), F.xxhash64("key").alias("key_hash"),
                          *[F.col(c) for c in INPUT_COLUMNS])


def fold_frame(spark, path: str, inputs, version: int, *, wall_ms: int, t0: int,
               sem: Semantics, positions: bool = False, may_hold=None) -> Spread:
    """Fold ``inputs`` (``tagged_inputs``) onto the table at ``version``, on the executors
    (module docstring, steps 2-4). ``positions``: the stored rows carry their file's name
    hash and row index, and the fold names those the commit deletes (``position`` rows),
    for a replace by position. ``may_hold``: the batch's ``key_filter``, or ``None`` for a
    join with its keys' hashes."""
    from pyspark import StorageLevel
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    table = delta_log.table_at(spark, path, version)
    where = []
    if positions:
        try:  # analysed here, before any job: a reader without them writes Delta's way
            table = table.select(
                "*", F.xxhash64("_metadata.file_name").alias(POSITION_COLUMNS[0]),
                F.col("_metadata.row_index").alias(POSITION_COLUMNS[1]))
            where = list(POSITION_COLUMNS)
        except AnalysisException as exc:
            log.warning("%s: Delta's write instead of a replace by position: %s", path,
                        positional.one_line(exc))
    stored = table.select("key_hash", *STORED_COLUMNS, *where)
    if may_hold is not None:
        stored = stored.where(may_hold)
    else:
        hashes = inputs.where(F.col("key").isNotNull()).select("key_hash").distinct()
        stored = stored.join(hashes, "key_hash", "left_semi")
    stored = stored.select(F.lit(STORED).alias("tag"), "key_hash", *STORED_COLUMNS, *where)
    partitions = max(1, spark.sparkContext.defaultParallelism)
    fold = functools.partial(fold_partition, wall_ms=wall_ms, t0=t0, sem=sem,
                             inline=driver_write.EXPIRED_KEYS_INLINE)
    out = (inputs.unionByName(stored, allowMissingColumns=True)
           .repartition(partitions, "key_hash")
           .mapInArrow(fold, OUTPUT_DDL)
           .persist(StorageLevel.MEMORY_AND_DISK))
    figures = Figures()  # this job computes (and keeps) every partition's whole output
    for row in out.where(F.col("kind") == FIGURES).select("figures").collect():
        figures.add(json.loads(row.figures))
    return Spread(out, figures)


def key_filter(spark, inputs):
    """A condition on ``key_hash`` that holds for every hash of ``inputs``' keyed records
    and for about ``KEY_FILTER_FPP`` of the others, from a Bloom filter built on the
    executors (``KeyFilter.mightContain``, ttl's jar); ``None`` for the join instead:
    switched off (``KEY_FILTER_ENABLED``), or without ttl's jar on the driver or, on a
    cluster, the executors (each said once, in a warning). Made once a batch: its every
    fold (again after a commit landed) reads the same records."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import Column

    try:  # the profile's were checked at load; a session's own settings are checked here
        fpp = key_filter_fpp(spark.conf.get(KEY_FILTER_FPP, "0.01"))
        enabled = switch(KEY_FILTER_ENABLED, spark.conf.get(KEY_FILTER_ENABLED, "true"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not enabled:
        return None
    if fpp == 1:
        return F.lit(True)
    found = _key_filter_class(spark)
    if found is None:
        return None
    hashes = inputs.where(F.col("key").isNotNull()).select("key_hash")
    count = hashes.count()  # sizes the filter (Spark's makes none of no rows)
    if not count:
        return F.lit(False)
    return Column(found.mightContain(spark.sparkContext._jsc, hashes._jdf, "key_hash", count,
                                     fpp))


def _key_filter_class(spark):
    """``KeyFilter`` when the driver has it and, off local mode, so do the executors (a
    one-row filter run there once per application: a jar on the driver's classpath only
    would fail every batch); else ``None``, with one warning."""
    from pyspark.sql import functions as F
    from pyspark.sql.classic.column import Column

    context = spark.sparkContext
    known = _EXECUTORS_HAVE_IT.get(context.applicationId)
    if known is not None:
        return known or None
    found = loaded(spark, "ttl.delta.KeyFilter")
    usable = found is not None
    why = "ttl's jar is not on the driver's classpath (`ttl setup` builds it)"
    if usable and not context.master.startswith("local"):
        try:
            ids = spark.range(1).select(F.col("id").alias("key_hash"))
            usable = ids.where(Column(found.mightContain(
                context._jsc, ids._jdf, "key_hash", 1, 0.01))).count() == 1
            why = "it gave a wrong count on the executors"
        except Exception as exc:  # noqa: BLE001 - the join is always there
            usable, why = False, f"the executors could not run it: {positional.one_line(exc)}"
    if not usable:
        log.warning("the executors' batches find their stored rows with a join, not ttl's "
                    "Bloom filter: %s", why)
    _EXECUTORS_HAVE_IT[context.applicationId] = found if usable else False
    return found if usable else None


#: Per Spark application: ``KeyFilter`` where it is usable, else False (``_key_filter_class``).
_EXECUTORS_HAVE_IT: dict[str, object] = {}


def in_session(frame, spark):
    """``frame`` planned in ``spark``'s session: a batch's writes must run in the store's
    own session, whose settings say which commit they make (``ttl.commit``), and a
    DataFrame writes through the session it belongs to (the stream's frames belong to the
    query's session). The same logical plan, so the same rows (Spark's Kafka source reads
    its batch's fixed offsets wherever it is planned)."""
    from pyspark.sql import DataFrame

    if frame.sparkSession is spark:
        return frame
    moved = java_class(spark, "org.apache.spark.sql.classic.Dataset").ofRows(
        spark._jsparkSession, frame._jdf.logicalPlan())
    return DataFrame(moved, spark)


#: Up to this many changed keys, the executors' batch hands its change rows to the
#: publisher (``keep_changes``: collected once the commit is made, cheaper than the
#: publisher reading the version's change data back); more are not brought to the
#: driver's memory, and the publisher reads the change data as after any other commit.
KEPT_CHANGES_MAX = 200_000


@dataclass
class HeldChanges:
    """A batch's change rows, still held on the executors, for publication from there
    (``keep_changes="held"``); whoever publishes them releases them."""

    frame: object  # DataFrame: ``kind``, ``key``, the record's columns, ``removal_op``
    _held: object  # the persisted result they are read from

    def release(self) -> None:
        _unpersist(self._held)


def _unpersist(frame) -> None:
    """Release a persisted DataFrame's blocks; a failure only warns (the batch's outcome,
    committed or failed, is what the caller must see)."""
    try:
        frame.unpersist()
    except Exception:  # noqa: BLE001 - only cached blocks: Spark drops them in time anyway
        log.warning("could not release a batch's cached rows", exc_info=True)


@contextmanager
def held_inputs(spark, records) -> Iterator:
    """The batch's input as the fold's rows (``tagged_inputs``, in ``spark``'s session),
    persisted on the executors while the caller's block runs: Kafka is read once, for the
    keys' filter and the fold alike, and for every run again of the batch (after a
    commit landed during its fold, or a Delta conflict at its commit)."""
    from pyspark import StorageLevel

    inputs = tagged_inputs(in_session(records, spark)).persist(StorageLevel.MEMORY_AND_DISK)
    try:
        yield inputs
    finally:
        _unpersist(inputs)


def write_frame(spark, path: str, dead_letter_path: str, inputs, *, sem: Semantics,
                wall_ms: int, t0: int, metadata: Callable[[Figures], dict],
                txn: tuple[str, int] | None = None, phases: BatchPhases | None = None,
                keep_changes: bool | str = False, done: set[str] | None = None,
                fence: Callable[[], None] | None = None) -> tuple[WriteResult, dict]:
    """``write.write_batch`` for a batch that stays on the executors: ``inputs`` are its
    records as the fold's rows (``held_inputs``); ``metadata`` gives the commit's metadata
    (the stream time before the batch under ``stream_time``) from the batch's figures (its
    input offsets), and may raise to refuse the batch before anything is written.
    ``keep_changes``: as there, up to ``KEPT_CHANGES_MAX`` changed keys; ``"held"``: the
    change rows stay on the executors (``HeldChanges``), however many. ``done``,
    ``fence``: as there; the fence is also checked after the fold (which can take many
    seconds), before the version is checked again for the last time."""
    phases = phases or BatchPhases()
    done = set() if done is None else done
    spreads: list[Spread] = []
    filters: list = []  # the batch's key filter, made at its first fold

    def attempt(version: int) -> tuple[Spread, WriteResult, dict]:
        for old in spreads:  # an earlier attempt's, at an older version
            _unpersist(old.out)
        spreads.clear()
        with phases.phase("fold"):
            if not filters:
                filters.append(key_filter(spark, inputs))
            spread = fold_frame(spark, path, inputs, version, wall_ms=wall_ms, t0=t0, sem=sem,
                                positions=_by_position(spark, path, version),
                                may_hold=filters[0])
        spreads.append(spread)
        prepared = _prepare(spark, path, dead_letter_path, spread, version, wall_ms=wall_ms,
                            t0=t0, metadata=metadata, txn=txn, phases=phases, done=done)
        if fence is not None:  # again after the fold, which can take many seconds
            fence()
        # Everything before the commit happens in the attempt, so the version check
        # after it covers it all: a commit landing meanwhile makes the batch fold again.
        return (spread, *prepared)

    held = None
    try:
        (spread, result, meta), version_before = at_stable_version(spark, path, attempt, fence)
        _commit(spark, path, spread, result, meta, wall_ms=wall_ms, txn=txn, phases=phases)
        f = spread.figures
        if not (keep_changes and result.applied and result.version == version_before + 1):
            return result, meta
        if keep_changes == "held":
            held = spread.out
            result.changes = HeldChanges(spread.changes(), held)
        elif f.upserted + f.deleted + f.expired <= KEPT_CHANGES_MAX:
            try:
                result.changes = (spread.changes()
                                  .select("kind", "key", "value", "ts", "headers",
                                          "record_ttl").toArrow())
            except Exception:  # noqa: BLE001 - committed: the publisher reads the change data
                log.warning("could not collect the change rows of version %s; the publisher "
                            "reads its change data", result.version, exc_info=True)
        return result, meta
    finally:
        for spread in spreads:
            if spread.out is not held:
                _unpersist(spread.out)


def _prepare(spark, path: str, dead_letter_path: str, spread: Spread, version: int, *,
             wall_ms: int, t0: int, metadata: Callable[[Figures], dict],
             txn: tuple[str, int] | None, phases: BatchPhases,
             done: set[str]) -> tuple[WriteResult, dict]:
    """What comes before the commit: its metadata (which may refuse the batch: nothing is
    written before it), the dead letters and the expired-on-arrival keys."""
    f = spread.figures
    meta = metadata(f)
    result = WriteResult(f.counts, f.max_ts, rows_upserted=f.upserted, rows_deleted=f.deleted,
                         rows_expired=f.expired, rejected_by_reason=f.counts.rejected,
                         earliest_expiry=f.earliest_expiry, version_before=version)
    if f.rejects and "dead_letters" not in done:  # the same records are rejected every time
        with phases.phase("dead_letters"):
            append_dead_letters(spread.rejects(), dead_letter_path, txn, wall_ms)
        done.add("dead_letters")
    aside = f.expired > driver_write.EXPIRED_KEYS_INLINE  # read now: one setting
    if aside:
        expired: list[str] | str = EXPIRED_KEYS_ASIDE
    elif f.expired and f.expired_keys is not None and len(f.expired_keys) == f.expired:
        expired = f.expired_keys  # named by the partitions' figures: no job
    elif f.expired:
        expired = [bytes(r.key).hex() for r in spread.expired_keys().collect()]
    else:
        expired = []
    final_meta = final_metadata(meta, f.max_ts, t0=t0, wall_ms=wall_ms, expired_keys=expired)
    if aside:
        with phases.phase("expired_keys"):
            append_expired_keys(spark, sibling(path, EXPIRED_KEYS_SUFFIX),
                                final_meta["write_id"], spread.expired_keys(), wall_ms)
    return result, final_meta


def _by_position(spark, path: str, version: int) -> bool:
    """Whether the batch's stored rows are read with their positions, for a replace by
    position (``POSITIONAL_ENABLED``, ``positional.writable``); a failure to tell is a
    warning, and Delta's write."""
    if not driver_write.positional_enabled(spark):
        return False
    try:
        return positional.writable(spark, path, version)
    except Exception as exc:  # noqa: BLE001 - Delta's write is always there
        log.warning("%s: Delta's write instead of a replace by position: %s", path,
                    positional.one_line(exc))
        return False


def _replaced_by_position(spark, path: str, spread: Spread, result: WriteResult,
                          txn: tuple[str, int] | None,
                          delta_write: Callable[[], None]) -> Callable[[], None]:
    """The batch's replace (or MERGE) made by ttl (``positional.replace_by_name``): the
    stored rows the fold named deleted by position, at the version it read them, and the
    upserts' rows inserted, in one Delta transaction. None of Delta's second scan of the
    table and its join (the fold found the rows), and no set of the batch's keys built in
    the driver. Should it not take them (``PositionalUnsupported``, nothing committed),
    ``delta_write``, which ``result`` then names."""
    def write() -> None:
        try:
            positional.replace_by_name(
                spark, path, result.version_before, spread.figures.positions,
                lambda: spread.positions().toArrow(),
                spread.table_rows() if spread.figures.upserted else None,
                ", ".join(MATCH_COLUMNS[result.by_hash]), txn)
            result.write = "positional"
        except PositionalUnsupported as exc:
            log.warning("%s: Delta's write instead of a replace by position: %s", path, exc)
            delta_write()
    return write


def _commit(spark, path: str, spread: Spread, result: WriteResult, meta: dict, *,
            wall_ms: int, txn: tuple[str, int] | None, phases: BatchPhases) -> None:
    """The batch's commit, from the DataFrames the executors hold (no naming of keys: a
    batch large enough for this path touches most files anyway)."""
    f = spread.figures
    removes = bool(f.deleted + f.expired)
    with phases.phase("write"):
        result.write = write_kind(spark, changes=bool(f.upserted) or removes,
                                  stored=bool(f.stored), upserts=bool(f.upserted),
                                  removes=removes)
        result.by_hash = result.write == "replace" and f.by_hash
        writes = {
            "append": lambda: append_rows(spread.table_rows(), path),
            "replace": lambda: replace_rows(
                spark, path, spread.table_rows(),
                spread.changes().select("key_hash", "key") if removes else None,
                by_hash=f.by_hash),
            "merge": lambda: merge_into(spark, path, spread.changes(), wall_ms),
            "empty": lambda: empty_commit(spark, path, meta, txn),
        }
        if result.write in ("replace", "merge") and f.positions is not None:
            writes[result.write] = _replaced_by_position(spark, path, spread, result, txn,
                                                         writes[result.write])
        commit_write(spark, path, result, meta, txn, writes[result.write])
