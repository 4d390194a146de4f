"""Eviction: sweeps by wall clock or stream time, TTL changes, dry runs (docs/semantics.md).

A sweep at clock value T is one commit that deletes the rows with ``expires_at <= T`` in
the version it is made on (never a key list planned earlier), so a key refreshed by a
concurrent write survives, also on a retry: Delta's ``DELETE ... WHERE expires_at <= T``,
which evaluates the predicate inside its commit, or ttl's delete by position
(``_delete_by_position``), which finds the due rows in one version and commits on it, and
which Delta refuses when any commit but a blind append landed after that version (the
sweep then runs again; a blind append passes, as it does beside Delta's DELETE).
The commit carries ``op=sweep``, the clock, T and a sweep id in its metadata, which is how
the changelog publisher tags each evicted key's tombstone ``ttl.op=expire`` with
``ttl.clock``. A second sweep at the same T finds nothing: sweeps are idempotent.

Cost: either reads only files whose ``expires_at`` min/max range reaches T (data skipping;
statistics are kept for ``expires_at``) and writes deletion vectors instead of rewriting
files, so it follows the number of expired entries as far as the file layout allows;
``optimize`` orders files by ``expires_at`` (Z-order) to keep those ranges narrow, unless
``maintenance.cluster_by`` asks for ``key_hash`` (narrow key ranges for lookups and small
batches' writes instead: docs/performance.md).
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

import pyarrow as pa

from ttl import commit, delta_log, delta_rs
from ttl.delta_log import retrying
from ttl.errors import (
    ConfigError,
    LeaseLost,
    LogCleanupRefused,
    PositionalUnsupported,
    StoreMissing,
    VacuumRefused,
)
from ttl.expiry_floor import NEVER, earliest_expiry
from ttl.names import (
    EXPIRED_KEYS_SUFFIX,
    OP_ALTER,
    OP_SWEEP,
    PROP_OPTIMIZED_AT,
    PROP_REORDERED_BY,
    PROP_REORDERED_THROUGH,
    PROP_TTL,
    PROP_VACUUMED_AT,
    sibling,
)
from ttl.store import ordering, positional, write
from ttl.store.layout import set_properties, ttl_property
from ttl.timestamps import expiry_column

log = logging.getLogger(__name__)

SweepClock = Literal["wall", "stream"]


@dataclass
class SweepResult:
    clock: SweepClock
    t: int | None
    sweep_id: str = ""
    evicted: int = 0
    dry_run: bool = False
    skipped: str | None = None
    version: int | None = None
    retries: int = 0
    seconds: float = 0.0
    lateness_ms: dict[str, int | None] = field(default_factory=dict)
    sample_keys: list[bytes] = field(default_factory=list)
    nothing_due: int | None = None  # the earliest expiry, when it is after T
    #: How it deleted: ``positional`` (ttl's delete by position) or ``delete`` (Delta's).
    write: str | None = None

    def summary(self) -> str:
        if self.skipped:
            return f"skipped: {self.skipped}"
        if self.nothing_due is not None:
            when = "never" if self.nothing_due == NEVER else self.nothing_due
            return (f"{self.clock} sweep at T={self.t}: nothing due (earliest expiry {when}) "
                    f"in {self.seconds:.3f} s")
        verb = "would evict" if self.dry_run else "evicted"
        late = ", ".join(f"{k}={v}" for k, v in self.lateness_ms.items())
        how = " by position" if self.write == "positional" else ""
        return (f"{self.clock} sweep at T={self.t}: {verb} {self.evicted} entries{how} "
                f"in {self.seconds:.1f} s (retries {self.retries}"
                f"{', lateness ms ' + late if late else ''})")


def sweep_time(store, clock: SweepClock) -> int | None:
    """T for a sweep now: the wall clock, or stream time (``None`` until the first record)."""
    return store.wall_clock.now_ms() if clock == "wall" else store.stream_time.value


def expired_predicate(t: int) -> str:
    return f"expires_at IS NOT NULL AND expires_at <= {int(t)}"


def sweep(store, clock: SweepClock, t: int | None = None, *, dry_run: bool = False,
          sample: int = 10, warm: bool = False) -> SweepResult:
    """Delete exactly the entries with ``expires_at <= T`` in one commit (or count them).

    The lateness of what it evicted is measured apart (``measure_lateness``): it reads the
    sweep's change data again, as long as the DELETE took on a big table, so callers that
    hold the store's lock measure it after releasing it. ``warm``: a stream's sweep, whose
    next batch needs the new version's snapshot (``DeltaStore.warm_later``)."""
    started = time.monotonic()
    t = sweep_time(store, clock) if t is None else t
    result = SweepResult(clock, t, dry_run=dry_run)
    if t is None:
        result.skipped = "no stream time yet (no record seen): nothing expires by stream time"
        return result
    predicate = expired_predicate(t)
    if dry_run:
        expired = store.spark.read.format("delta").load(store.path).where(predicate)
        result.evicted = expired.count()
        result.sample_keys = [bytes(r.key) for r in expired.select("key").limit(sample).collect()]
        result.seconds = time.monotonic() - started
        return result
    result.sweep_id = uuid.uuid4().hex
    meta = {"op": OP_SWEEP, "store": store.conf.name, "clock": clock, "t": t,
            "sweep_id": result.sweep_id, "stream_time": store.stream_time.value}

    def delete() -> None:
        store.check_writable()
        with commit.commit_settings(store.spark, meta):
            result.write = "positional" if _delete_by_position(store, t, predicate) else "delete"
            if result.write == "delete":
                store.spark.sql(f"DELETE FROM delta.`{store.path}` WHERE {predicate}")

    before, table_id = delta_log.position(store.spark, store.path)
    earliest = _earliest_expiry(store, before, table_id)
    if earliest is not None and t < earliest:  # nothing due: no DELETE, no commit, no job
        result.nothing_due = earliest
        result.seconds = time.monotonic() - started
        log.debug("%s", result.summary())
        return result
    _, result.retries = retrying(delete, what=f"{clock} sweep at {t}")
    _record_outcome(store, result, before)
    if result.version is not None and warm:  # in the background, then a checkpoint when due
        store.warm_later()
    elif result.version is not None:  # when due, in the background (an idle stream's sweeps)
        store.checkpoint_later()
    store.expiry_floor.after_sweep(before, delta_log.latest_version(store.spark, store.path), t,
                                   result.version)
    result.seconds = time.monotonic() - started
    log.info("%s", result.summary())
    return result


def _delete_by_position(store, t: int, predicate: str) -> bool:
    """The sweep's DELETE made by ttl (``positional.delete_by_position``): the driver reads
    the ``expires_at`` of the files and row groups whose statistics may hold a due entry
    and deletes the due rows by their position, in Delta's transaction at the version it
    read (any commit after it but a blind append makes Delta refuse this one, and the
    sweep runs again), where
    Delta's DELETE runs about ten Spark jobs. False, having committed nothing, when the
    table does not take it (``positional.rows_to_delete``; switched off with the batches'
    replace by position), or a step before its commit failed: the caller then runs
    Delta's DELETE."""
    if not write.positional_enabled(store.spark):
        return False
    options = store.lookup.options
    try:
        version = delta_log.latest_version(store.spark, store.path)
        files = pa.table(delta_rs.table(store.path, options, version)
                         .get_add_actions(flatten=True))
    except Exception as exc:  # noqa: BLE001 - nothing written yet: Delta's DELETE is safe
        log.warning("%s: Delta's DELETE instead of ttl's by position, which failed to read "
                    "the log: %s: %s", store.path, type(exc).__name__, exc)
        return False
    touched = positional.rows_to_delete(
        store.spark, store.path, version, files, positional.may_be_due(files, t),
        lambda: positional.find_due(store.path, files, t, options), options, "Delta's DELETE")
    if touched is None:
        return False
    if touched:
        try:
            positional.delete_by_position(store.spark, store.path, version, touched, predicate)
        except PositionalUnsupported as exc:  # raised before anything is committed
            log.warning("%s: Delta's DELETE instead of ttl's by position: %s", store.path, exc)
            return False
    return True


def prime_expiry_floor(store) -> int | None:
    """Learn a bound on the table's earliest expiry now (from the log's statistics), so the
    first sweep of a run finds it known.

    The stream calls this at start-up, before its query: otherwise its first wall sweep
    computes it under the store's lock, and the batches that come meanwhile wait (1.7 s
    seen in ``tests.bench.stream_bench``'s trickle, its worst latency)."""
    return _earliest_expiry(store, *delta_log.position(store.spark, store.path))


def _earliest_expiry(store, version: int, table_id: str) -> int | None:
    """The driver's lower bound on the table's earliest expiry at ``version``, computed
    (``expiry_floor.earliest_expiry``: from the log's statistics) when unknown; ``None``
    when the table moved meanwhile."""
    known = store.expiry_floor.known_at(version, table_id)
    if known is not None:
        return known
    read_at, value = earliest_expiry(store.spark, store.path)
    if read_at != version:
        return None  # another commit landed meanwhile: sweep without the shortcut
    store.expiry_floor.set(version, value, table_id)
    return store.expiry_floor.known_at(version, table_id)


def _record_outcome(store, result: SweepResult, before: int) -> None:
    """Find the sweep's commit (by its id, after version ``before``) for the evicted count."""
    found = delta_log.find_commit(store.spark, store.path, op=OP_SWEEP, key="sweep_id",
                                  value=result.sweep_id, since=before)
    if found is None:  # nothing matched: Delta made no commit
        return
    result.version = found.version
    result.evicted = found.metric("numDeletedRows")


def measure_lateness(store, result: SweepResult) -> SweepResult:
    """Fill ``result.lateness_ms`` (p50, p99 and max of T - ``expires_at`` over the evicted
    entries) from the sweep's own commit's change data; nothing for a sweep that evicted
    nothing. It reads every file the sweep touched, so it is kept out of the sweep (and of
    the store's lock); the version stays readable until VACUUM's retention passes. A
    failure loses only the figure (a warning), never the sweep."""
    if not result.evicted or result.version is None or result.dry_run:
        return result
    try:
        _lateness(store, result)
    except Exception:  # noqa: BLE001 - a figure, not the eviction
        log.warning("could not measure the lateness of the %s sweep at T=%s", result.clock,
                    result.t, exc_info=True)
    return result


def _lateness(store, result: SweepResult) -> None:
    from pyspark.sql import functions as F

    gone = (store.spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", result.version)
            .option("endingVersion", result.version).load(store.path)
            .where("_change_type = 'delete'"))
    # try_subtract: expires_at may sit near -2^63 (ANSI mode raises on overflow)
    late = F.expr(f"try_subtract({int(result.t)}, expires_at)")
    row = gone.select(F.percentile_approx(late, [0.5, 0.99]).alias("q"),
                      F.max(late).alias("max")).first()
    q = row.q or (None, None)  # None when every lateness saturated (int64 edges)
    result.lateness_ms = {"p50": q[0], "p99": q[1], "max": row["max"]}
    log.info("%s sweep at T=%s: lateness ms p50=%s p99=%s max=%s", result.clock, result.t,
             q[0], q[1], row["max"])


# -- TTL changes ----------------------------------------------------------------------------

def _store_ttl_expiry(ttl_ms: int | None):
    """``expires_at`` under a store TTL of ``ttl_ms`` for rows without a per-record TTL."""
    from pyspark.sql import functions as F

    return expiry_column("ts", F.lit(ttl_ms).cast("bigint"))


def would_evict(store, ttl_ms: int | None, at: int | None = None) -> int:
    """How many entries live now a store TTL of ``ttl_ms`` would evict now (per-record TTLs
    kept). Entries already expired are not counted: they leave with the next sweep
    whatever the TTL (``already_expired``)."""
    from pyspark.sql import functions as F

    at = store.now() if at is None else at
    new_expiry = (F.when(F.col("record_ttl").isNotNull(), F.col("expires_at"))
                  .otherwise(_store_ttl_expiry(ttl_ms)))
    return (store.spark.read.format("delta").load(store.path)
            .where(_live_at(at) & new_expiry.isNotNull() & (new_expiry <= F.lit(at)))
            .count())


def already_expired(store, at: int | None = None) -> int:
    """How many entries are expired at ``at`` but not yet swept: a TTL change leaves them
    expired (``alter_ttl``)."""

    at = store.now() if at is None else at
    return (store.spark.read.format("delta").load(store.path)
            .where(~_live_at(at)).count())


def _live_at(at: int):
    """Live at clock ``at``: no expiry, or one after ``at`` (reads hide the rest)."""
    from pyspark.sql import functions as F

    return F.col("expires_at").isNull() | (F.col("expires_at") > F.lit(at))


@dataclass
class AlterResult:
    old_ttl: int | None
    new_ttl: int | None
    would_evict_now: int
    dry_run: bool
    version: int | None = None
    stay_expired: int = 0  # expired before the change: left expired, for the next sweep


def alter_ttl(store, new_ttl: int | None, *, dry_run: bool = False,
              at: int | None = None) -> AlterResult:
    """Recompute ``expires_at`` for the store TTL in one commit, then record the new TTL.

    Only entries live at the change (``at``, default the store's clock now) are recomputed:
    an entry already expired stays expired, even under a longer TTL, and leaves with the
    next sweep. Recomputing it would resurrect it (reads would return it again and the
    changelog would publish it as a put), though every reader has seen it gone. The data
    change is one UPDATE commit (published like any change); the table property follows
    it. If the process dies in between, running the same command again finishes it (the
    UPDATE is idempotent).
    """
    raw = store.properties.get(PROP_TTL)
    old = None if raw in (None, "none") else int(raw)
    fixed = at
    at = store.now() if at is None else at
    result = AlterResult(old, new_ttl, would_evict(store, new_ttl, at), dry_run,
                         stay_expired=already_expired(store, at))  # the counts: at ``at``
    if dry_run:
        return result
    meta = {"op": OP_ALTER, "store": store.conf.name, "ttl": new_ttl, "previous_ttl": old,
            "stream_time": store.stream_time.value, "at": at}

    def update() -> None:
        from delta.tables import DeltaTable

        store.check_writable()
        # The clock when the UPDATE starts (each attempt): an entry that expired while
        # the counts ran stays expired too.
        now = store.now() if fixed is None else fixed
        meta["at"] = now
        with commit.commit_settings(store.spark, meta):
            DeltaTable.forPath(store.spark, store.path).update(
                f"record_ttl IS NULL AND (expires_at IS NULL OR expires_at > {int(now)})",
                {"expires_at": _store_ttl_expiry(new_ttl)})

    retrying(update, what="TTL change")
    set_properties(store.spark, store.path, {PROP_TTL: ttl_property(new_ttl)})
    store.properties[PROP_TTL] = ttl_property(new_ttl)
    store.sem = replace(store.sem, ttl=new_ttl)
    result.version = delta_log.latest_version(store.spark, store.path)
    return result


# -- maintenance ------------------------------------------------------------------------------

#: Delta's bound on the size of the files OPTIMIZE writes.
OPTIMIZE_MAX_FILE_SIZE = "spark.databricks.delta.optimize.maxFileSize"
#: The size under which a compaction (an OPTIMIZE without ZORDER) rewrites a file.
OPTIMIZE_MIN_FILE_SIZE = "spark.databricks.delta.optimize.minFileSize"


#: A scheduled OPTIMIZE reorders the whole table only once files written since the last
#: reordering hold at least this share of its bytes; before that it only compacts small
#: files. Delta's Z-order takes every file of the table (it does for multi-dimensional
#: clustering), as the ``both`` rewrite does, so reordering at every ``optimize_interval``
#: (6 h) rewrote the whole table four times a day, and VACUUM kept each copy for
#: ``vacuum_retention`` (7 days): up to 29 times the table on disk. With this share, a
#: table reorders about once per quarter of new data, and sweeps and lookups read at most
#: that share of unordered bytes beyond what the layout skips.
REORDER_SHARE = 0.25


def optimize(store, cluster_by: str = "expires_at", file_bytes: int = 128 * 2**20, *,
             incremental: bool = False) -> dict[str, int] | None:
    """Compact small files and order them by ``cluster_by`` (``expires_at``: sweeps skip more
    files; ``key_hash``: lookups and small batches' writes do; ``both``: expiry groups
    ordered by key, ``ttl.store.ordering``), in files of at most ``file_bytes``; then
    checkpoint in the background when one is due (other writers' commits too). With
    ``incremental`` (the scheduled job), the whole table is reordered only when
    ``REORDER_SHARE`` of it was written since the last reordering, else small files are
    compacted. Returns the ``both`` rewrite's account (files, groups, version), else
    ``None``."""
    done: dict[str, int] = {}
    if cluster_by not in ("expires_at", "key_hash", "both"):
        raise ValueError(f"maintenance.cluster_by = {cluster_by!r}: expected expires_at, "
                         "key_hash or both")
    reorder = not incremental or _reorder_due(store, f"{cluster_by}:{file_bytes}")

    def compact() -> None:
        store.check_writable()
        if reorder and cluster_by == "both":
            done.update(ordering.rewrite(store.spark, store.path, file_bytes,
                                         before_commit=store.check_writable))
            return
        order = f" ZORDER BY ({cluster_by})" if reorder else ""
        with _file_sizes(store.spark, file_bytes):
            store.spark.sql(f"OPTIMIZE delta.`{store.path}`{order}")

    retrying(compact, what="OPTIMIZE")
    marks = {}
    if reorder:
        files = _files(store)
        marks[PROP_REORDERED_THROUGH] = str(max(files["modification_time"].to_pylist(),
                                                default=0))
        marks[PROP_REORDERED_BY] = f"{cluster_by}:{file_bytes}"
    _mark_done(store, PROP_OPTIMIZED_AT, marks)
    store.checkpoint_later()
    _dead_letters_kept(store, "OPTIMIZE", lambda: retrying(
        lambda: _compact_dead_letters(store, file_bytes), what="OPTIMIZE of the dead letters"))
    return done or None


@contextlib.contextmanager
def _file_sizes(spark, file_bytes: int) -> Iterator[None]:
    """OPTIMIZE's file sizes while the block runs: files of at most ``file_bytes``, and
    only files under three quarters of it rewritten (Delta's default bound is 1 GiB: every
    file of a table of 128 MiB files, and the whole of a smaller table at every run)."""
    sizes = {OPTIMIZE_MAX_FILE_SIZE: str(file_bytes),
             OPTIMIZE_MIN_FILE_SIZE: str(file_bytes * 3 // 4)}
    conf = spark.conf
    before = {k: conf.get(k, None) for k in sizes}
    for k, v in sizes.items():
        conf.set(k, v)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                conf.unset(k)
            else:
                conf.set(k, v)


def _compact_dead_letters(store, file_bytes: int) -> None:
    """The dead-letter table's small files, one per batch that rejected records (tens of
    thousands a day under steady bad input), compacted into few: what ``ttl dead-letters``
    and a replay read. Its rows stay (dead letters go only by an operator's hand), and
    VACUUM removes the compacted files after the retention."""
    if not delta_log.is_delta_table(store.spark, store.dead_letter_path):
        return
    store.check_writable()
    with _file_sizes(store.spark, file_bytes):
        store.spark.sql(f"OPTIMIZE delta.`{store.dead_letter_path}`")


def _dead_letters_kept(store, what: str, job: Callable[[], object]) -> None:
    """The dead-letter table's part of a maintenance job, after the store's (recorded
    done whatever becomes of this): a failure is logged, and the next run tries again."""
    try:
        job()
    except (LeaseLost, StoreMissing):
        raise  # the store is not ours to write any more: as any maintenance step says
    except Exception as exc:  # noqa: BLE001 - the store's own maintenance is done
        log.warning("%s of the dead-letter table %s failed (%s: %s); the next run tries "
                    "again", what, store.dead_letter_path, type(exc).__name__, exc)


def _files(store):
    """The table's data files (delta-rs add actions: path, size, modification time), read
    with the storage options the store's lookup already holds."""
    import pyarrow as pa

    return pa.table(delta_rs.table(store.path, store.lookup.options)
                    .get_add_actions(flatten=True))


def _reorder_due(store, layout: str) -> bool:
    """Whether files written since the last full reordering (``PROP_REORDERED_THROUGH``)
    hold at least ``REORDER_SHARE`` of the table's bytes; a table never reordered, or
    reordered into another ``layout`` (``maintenance.cluster_by`` and
    ``optimize_file_bytes`` changed since), is due."""
    import pyarrow.compute as pc

    props = delta_log.properties(store.spark, store.path)
    through = props.get(PROP_REORDERED_THROUGH)
    if through is None or not through.isdigit() or props.get(PROP_REORDERED_BY) != layout:
        return True
    files = _files(store)
    total = pc.sum(files["size_bytes"]).as_py() or 0
    newer = pc.sum(files.filter(pc.greater(files["modification_time"], int(through)))
                   ["size_bytes"]).as_py() or 0
    return total > 0 and newer >= REORDER_SHARE * total


def _mark_done(store, prop: str, more: dict[str, str] | None = None) -> None:
    """Record on the table when a maintenance job finished (``schedule.first_run``), in
    one commit with ``more``."""
    props = {prop: str(store.wall_clock.now_ms()), **(more or {})}

    def record() -> None:
        store.check_writable()  # again at every retry: a fence may be what conflicted
        set_properties(store.spark, store.path, props)

    retrying(record, what=f"recording {prop}")


#: VACUUM's own duration and the publisher's next step: the oldest unpublished commit must
#: be this much younger than the retention.
VACUUM_SLACK_MS = 600_000


def vacuum(store, retention_ms: int, minimum_ms: int, published: int | None) -> None:
    """VACUUM, refusing a retention that could remove change data or versions still needed:
    by configuration (the publisher's worst lag plus the drills' time-travel window), and by
    the publisher's measured position ``published`` (the last table version on the
    changelog; ``None``: unknown). VACUUM deletes change data files older than the
    retention, and a drill's time travel to the published version needs the files later
    versions removed, so the oldest unpublished commit must be younger than the retention.
    """
    if retention_ms < minimum_ms:
        raise ConfigError(
            f"maintenance.vacuum_retention ({retention_ms} ms) is shorter than "
            f"maintenance.publisher_max_lag + maintenance.drill_window ({minimum_ms} ms): "
            "VACUUM would remove change data the publisher or drills still need")
    hours = max(1, -(-retention_ms // 3_600_000))
    # The expired-keys rows older than this go after the VACUUM (fixed before it starts):
    # a retention before now, and before the oldest unpublished commit, whose rows the
    # publisher still reads.
    side_cutoff = store.wall_clock.now_ms() - hours * 3_600_000
    if published is None:
        raise VacuumRefused(f"VACUUM of {store.path} skipped: the publisher's position is "
                            "unknown (no reachable changelog brokers), so VACUUM could remove "
                            "change data not yet published")
    if published < delta_log.latest_version(store.spark, store.path):
        oldest = delta_log.commit_at(store.spark, store.path, published + 1)
        age_ms = (store.wall_clock.now_ms() - int(oldest.timestamp_s * 1000)
                  if oldest is not None else None)
        if oldest is not None:
            side_cutoff = min(side_cutoff, int(oldest.timestamp_s * 1000) - hours * 3_600_000)
        if age_ms is None or age_ms >= hours * 3_600_000 - VACUUM_SLACK_MS:
            age = "unknown" if age_ms is None else f"{age_ms / 3_600_000:.1f} h"
            raise VacuumRefused(
                f"VACUUM of {store.path} skipped: version {published + 1} is not yet on the "
                f"changelog and was committed {age} ago; RETAIN {hours} HOURS would remove "
                "its change data")
    store.spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    store.check_writable()  # VACUUM commits its start and end to the table's log
    store.spark.sql(f"VACUUM delta.`{store.path}` RETAIN {hours} HOURS")
    _vacuum_expired_keys(store, hours, side_cutoff)
    _mark_done(store, PROP_VACUUMED_AT)

    def vacuum_dead_letters() -> None:  # the files its OPTIMIZE compacted
        if delta_log.is_delta_table(store.spark, store.dead_letter_path):
            store.check_writable()
            store.spark.sql(f"VACUUM delta.`{store.dead_letter_path}` RETAIN {hours} HOURS")

    _dead_letters_kept(store, "VACUUM", vacuum_dead_letters)


def clean_log(store, retention_ms: int, published: int | None) -> None:
    """Remove the log's commits older than ``retention_ms`` once ``prepare_log_cleanup``
    allows it (``delta_log.clean_up_log``). Off S3 every snapshot update lists the whole
    log: this keeps its length to the retention's commits."""
    prepare_log_cleanup(store, retention_ms, published)
    remove_old_log(store, retention_ms)


def remove_old_log(store, retention_ms: int) -> None:
    """``delta_log.clean_up_log`` of the store's table (``prepare_log_cleanup`` first) and
    of its dead-letter and expired-keys tables, whose logs a write to them lists too; the
    publisher reads the latter's rows, never its log."""
    delta_log.clean_up_log(store.spark, store.path, retention_ms)
    for side in (store.dead_letter_path, sibling(store.path, EXPIRED_KEYS_SUFFIX)):
        if delta_log.is_delta_table(store.spark, side):
            delta_log.clean_up_log(store.spark, side, retention_ms)


def prepare_log_cleanup(store, retention_ms: int, published: int | None) -> None:
    """Refuse (``LogCleanupRefused``) a clean-up of the log that could remove a commit the
    publisher has not published (its measured position ``published``, the last table
    version on the changelog; ``None``: unknown), and keep what the commits it removes
    recorded: the store's floor (stream time and input position) is raised to the table's
    version, so a start-up finds them in the table's properties. A drill's time travel to
    the published version needs that version and a checkpoint before it, so the published
    version itself must be younger than the retention (``VACUUM_SLACK_MS`` of it to spare;
    Delta judges a file's age by its modification time, as this does). The clean-up itself
    commits nothing and may run beside commits (Delta runs it after its checkpoints)."""
    latest = delta_log.latest_version(store.spark, store.path)
    if published is None:
        raise LogCleanupRefused(f"clean-up of the log of {store.path} skipped: the "
                                "publisher's position is unknown (no reachable changelog "
                                "brokers), so it could remove commits not yet published")
    if published < latest:
        written = delta_log.commit_file_mtime_ms(store.spark, store.path, max(published, 0))
        age_ms = None if written is None else store.wall_clock.now_ms() - written
        if age_ms is None or age_ms >= retention_ms - VACUUM_SLACK_MS:
            age = "gone" if age_ms is None else f"written {age_ms / 3_600_000:.1f} h ago"
            raise LogCleanupRefused(
                f"clean-up of the log of {store.path} skipped: the changelog has the table "
                f"up to version {published} ({age}), and a retention of "
                f"{retention_ms / 3_600_000:.1f} h could remove it and the commits after it")
    store.raise_stream_time_floor(latest, now=True)


def _vacuum_expired_keys(store, hours: int, cutoff_ms: int) -> None:
    """The expired-keys table's rows written before ``cutoff_ms`` go too: the publisher
    reads a commit's rows only with its change data, which VACUUM removes after the
    retention, and the cutoff is a retention before the oldest unpublished commit as well
    (a row is written before its commit). Rows without ``written_at`` stay."""
    side = sibling(store.path, EXPIRED_KEYS_SUFFIX)
    if not delta_log.is_delta_table(store.spark, side):
        return
    if "written_at" not in store.spark.read.format("delta").load(side).columns:
        return  # made before the column: nothing says when its rows were written
    store.spark.sql(f"DELETE FROM delta.`{side}` WHERE written_at < {cutoff_ms}")
    store.spark.sql(f"VACUUM delta.`{side}` RETAIN {hours} HOURS")
