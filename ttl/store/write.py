"""The batch write path: a DataFrame of input records -> one Delta commit (BRIEF §3).

Plan, per micro-batch:

1. read the stored ts and expiry of the batch's keys (a broadcast semi-join on
   ``key_hash``, narrow columns), tag them, union with the input;
2. partition by key, sort (key, stored row first, partition, offset), and fold each key on
   the executors with the model's own ``validate``/``fold_key`` (``ttl.store.fold``);
3. cache the result; one small aggregation gives the counts and the batch's max timestamp;
4. rejected records go to the dead-letter table (its own idempotent append);
5. one MERGE applies the per-key changes, carrying the commit metadata (stream time, T0,
   expired-on-arrival keys, the caller's input offsets) and, if given, the idempotent
   ``txnAppId``/``txnVersion``. A batch that changes no row still commits (an empty append
   with the same metadata), so stream time and input offsets are always persisted.

The stored rows are read before the MERGE; that is safe because a store has one writer at a
time (BRIEF §4, the lease), and sweeps are serialized with batches in the same driver.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from functools import partial

from ttl import commit, delta_log
from ttl.model import Counts, Semantics
from ttl.names import PROP_LAST_NOOP_BATCH, PROP_STREAM_TIME_FLOOR
from ttl.phases import BatchPhases
from ttl.store.fold import FOLD_SCHEMA, fold_partition
from ttl.store.layout import HEADERS_TYPE, set_properties

INPUT_COLUMNS = ("key", "value", "timestamp", "headers", "partition", "offset")
INPUT_SCHEMA = (
    f"key binary, value binary, timestamp bigint, headers {HEADERS_TYPE}, partition int, "
    "offset bigint"
)


@dataclass
class WriteResult:
    """What one batch did: counts per record, table changes, and the commit it made."""

    counts: Counts
    max_ts: int | None
    rows_upserted: int = 0
    rows_deleted: int = 0
    rows_expired: int = 0
    version: int | None = None
    applied: bool = True
    rejected_by_reason: Counter = field(default_factory=Counter)
    metrics: dict[str, int] = field(default_factory=dict)  # the write's Delta operationMetrics
    version_before: int | None = None
    earliest_expiry: int | None = None  # the earliest expires_at the batch wrote
    changes: object = None  # Arrow: the rows the commit changed (``keep_changes``)


def _fold(spark, path: str, records, sem: Semantics, wall_ms: int, t0: int):
    from pyspark.sql import functions as F

    records = records.select(*INPUT_COLUMNS)
    # The lookup reads only what the fold needs of a stored row (its ts and expiry: a
    # stored value or headers never reach the output, since a key that changes takes the
    # record's), and broadcasts the batch's keys to the table instead of shuffling the
    # table's rows.
    keys = (records.where(F.col("key").isNotNull()).select("key").distinct()
            .withColumn("key_hash", F.xxhash64("key")))
    stored = (
        spark.read.format("delta").load(path)
        .select("key_hash", "key", "ts", "expires_at", "record_ttl")
        .join(F.broadcast(keys), ["key_hash", "key"], "left_semi")
        .select("key", F.lit(b"").alias("value"), F.col("ts").alias("timestamp"),
                F.lit(None).cast(HEADERS_TYPE).alias("headers"),
                F.lit(-1).alias("partition"), F.lit(-1).cast("bigint").alias("offset"),
                F.lit(True).alias("is_existing"), "expires_at", "record_ttl")
    )
    incoming = records.select(*INPUT_COLUMNS, F.lit(False).alias("is_existing"),
                              F.lit(None).cast("bigint").alias("expires_at"),
                              F.lit(None).cast("bigint").alias("record_ttl"))
    parts = int(spark.conf.get("spark.sql.shuffle.partitions"))
    ordered = (
        stored.unionByName(incoming)
        .repartition(parts, "key")
        .sortWithinPartitions("key", F.col("is_existing").desc(), "partition", "offset")
    )
    body = partial(fold_partition, wall_ms=wall_ms, t0=t0, sem=sem)
    return ordered.mapInArrow(body, FOLD_SCHEMA)


def _summarise(folded) -> tuple[WriteResult, list[str]]:
    from pyspark.sql import functions as F

    sums = [F.sum(c).alias(c) for c in ("n_records", "n_upserted", "n_deleted",
                                        "n_delete_absent", "n_late_dropped",
                                        "n_expired_on_arrival")]
    rows = (
        folded.groupBy("kind", "reason", "removal_op")
        .agg(F.count(F.lit(1)).alias("rows"), F.max("max_ts").alias("max_ts"),
             F.min("expires_at").alias("min_expires_at"), *sums)
        .collect()
    )
    counts = Counts()
    result = WriteResult(counts, None)
    for r in rows:
        counts.records += r["n_records"] or 0
        counts.upserted += r["n_upserted"] or 0
        counts.deleted += r["n_deleted"] or 0
        counts.delete_absent += r["n_delete_absent"] or 0
        counts.late_dropped += r["n_late_dropped"] or 0
        counts.expired_on_arrival += r["n_expired_on_arrival"] or 0
        if r["kind"] == "reject":
            counts.rejected[r["reason"]] += r["rows"]
        elif r["kind"] == "upsert":
            result.rows_upserted += r["rows"]
            result.earliest_expiry = r["min_expires_at"]
        elif r["kind"] == "delete" and r["removal_op"] == "expire":
            result.rows_expired += r["rows"]
        elif r["kind"] == "delete":
            result.rows_deleted += r["rows"]
        if r["max_ts"] is not None:
            result.max_ts = r["max_ts"] if result.max_ts is None else max(result.max_ts,
                                                                          r["max_ts"])
    result.rejected_by_reason = counts.rejected
    expired_keys = []
    if result.rows_expired:
        expired_keys = [bytes(r["key"]).hex() for r in
                        folded.where("kind = 'delete' AND removal_op = 'expire'")
                        .select("key").collect()]
    return result, expired_keys


def _write_dead_letters(folded, dead_letter_path: str, wall_ms: int,
                        txn: tuple[str, int] | None) -> None:
    from pyspark.sql import functions as F

    rejected = folded.where("kind = 'reject'").select(
        "key", "value", F.col("ts").alias("timestamp"), "headers",
        F.col("partition").alias("source_partition"), F.col("offset").alias("source_offset"),
        "reason", "detail", F.lit(wall_ms).cast("bigint").alias("rejected_at"),
    )
    writer = rejected.write.format("delta").mode("append")
    if txn is not None:
        writer = writer.option("txnAppId", f"{txn[0]}:dead-letters").option("txnVersion", txn[1])
    writer.save(dead_letter_path)


def _merge(spark, path: str, folded, wall_ms: int) -> None:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    changes = folded.where("kind IN ('upsert', 'delete')").withColumn(
        "key_hash", F.xxhash64("key"))
    # The source is already materialized (a local checkpoint): MERGE's own materialization
    # would copy it a second time.
    spark.conf.set("spark.databricks.delta.merge.materializeSource", "none")
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(changes.alias("s"), "t.key_hash = s.key_hash AND t.key = s.key")
        .whenMatchedDelete(condition="s.kind = 'delete'")
        .whenMatchedUpdate(set={
            "value": "s.value", "ts": "s.ts", "headers": "s.headers",
            "expires_at": "s.expires_at", "record_ttl": "s.record_ttl",
            "updated_at": F.lit(wall_ms).cast("bigint"),
        })
        .whenNotMatchedInsert(condition="s.kind = 'upsert'", values={
            "key": "s.key", "value": "s.value", "ts": "s.ts", "headers": "s.headers",
            "expires_at": "s.expires_at", "updated_at": F.lit(wall_ms).cast("bigint"),
            "key_hash": "s.key_hash", "record_ttl": "s.record_ttl",
        })
        .execute()
    )


def _empty_commit(spark, path: str, meta: dict) -> None:
    """A commit with no data change, so an all-no-op batch still persists its stream time and
    input offsets (Delta makes no commit for an empty append). It also raises the
    ``ttl.stream_time.floor`` property, which outlives the log's retention."""
    props = {PROP_LAST_NOOP_BATCH: str(meta["wall"])}
    if meta.get("stream_time") is not None:
        props[PROP_STREAM_TIME_FLOOR] = str(meta["stream_time"])
    set_properties(spark, path, props)


#: The write's Delta ``operationMetrics`` the batch log line carries (what it scanned,
#: rewrote and copied: the cost of a MERGE follows these, not the batch size).
LOGGED_METRICS = ("numSourceRows", "numTargetFilesAdded", "numTargetFilesRemoved",
                  "numTargetRowsCopied", "numTargetDeletionVectorsAdded", "numTargetBytesAdded",
                  "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
                  "scanTimeMs", "rewriteTimeMs", "executionTimeMs")


def apply_batch(spark, path: str, dead_letter_path: str, records, *, sem: Semantics,
                wall_ms: int, t0: int, metadata: dict,
                txn: tuple[str, int] | None = None, phases=None,
                keep_changes: bool = False) -> tuple[WriteResult, dict]:
    """Apply ``records`` in one store commit; returns the result and the final metadata.

    ``metadata`` must already hold the stream time *before* the batch under
    ``stream_time``; it is raised to include this batch's records before committing.
    ``phases`` (a ``ttl.phases.BatchPhases``) times the steps. With ``keep_changes`` the
    result carries the rows the commit changed (``WriteResult.changes``, Arrow) when they
    provably equal its change data feed: the table was at the lookup's version until this
    write, and the write made exactly one version.
    """
    phases = phases or BatchPhases()
    lookup_version = delta_log.latest_version(spark, path)
    # A local checkpoint (not just a cache) cuts the lineage: MERGE then sees a plain,
    # deterministic source instead of re-planning the fold and the semi-join on the target,
    # which made it twice as slow.
    with phases.phase("fold"):
        folded = _fold(spark, path, records, sem, wall_ms, t0).localCheckpoint(eager=True)
    try:
        with phases.phase("summary"):
            result, expired_keys = _summarise(folded)
        before = metadata.get("stream_time")
        after = before if result.max_ts is None else (
            result.max_ts if before is None else max(before, result.max_ts))
        final_meta = {**metadata, "stream_time": after, "t0": t0, "wall": wall_ms,
                      "expired_keys": expired_keys}
        if sum(result.rejected_by_reason.values()):
            with phases.phase("dead_letters"):
                _write_dead_letters(folded, dead_letter_path, wall_ms, txn)
        with phases.phase("write"):
            version_before = result.version_before = delta_log.latest_version(spark, path)
            with commit.commit_settings(spark, final_meta, txn):
                if result.rows_upserted or result.rows_deleted or result.rows_expired:
                    _merge(spark, path, folded, wall_ms)
                else:
                    _empty_commit(spark, path, final_meta)
            result.version = delta_log.latest_version(spark, path)
            result.applied = result.version != version_before
            if result.applied:
                written = delta_log.commit_info(spark, path, result.version)
                metrics = written.metrics if written is not None else {}
                result.metrics = {k: int(metrics[k]) for k in LOGGED_METRICS if k in metrics}
        if (keep_changes and result.applied and lookup_version == version_before
                and result.version == version_before + 1):
            with phases.phase("changes"):
                result.changes = (folded.where("kind IN ('upsert', 'delete')")
                                  .select("kind", "key", "value", "ts", "headers", "record_ttl")
                                  .toArrow())
        return result, final_meta
    finally:
        folded.unpersist()
