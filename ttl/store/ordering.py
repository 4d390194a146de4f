"""How the store's files are ordered, so that both lookups and sweeps skip files.

File skipping works per file, by a column's minimum and maximum. A lookup (or a small
batch's write) of k keys skips the files whose ``key_hash`` range holds none of them; a sweep
at T skips the files whose ``expires_at`` range starts after T. One copy of the rows has one
order, and each single-column order serves one of the two (docs/performance.md):

* ``key_hash``: a lookup reads about one file per key; a sweep that evicts reads every file;
* ``expires_at``: a sweep reads the files that hold due entries; a lookup reads every file.

``both`` (this module) puts the rows in G groups of equal size by ``expires_at`` (earliest
first), and orders each group by ``key_hash``. A lookup of k keys then reads about k files
in each group (k·G in all, of F files), and a sweep reads the files of the group that holds T
(F/G), plus the files it empties. ``G = sqrt(F / k)`` evens the two out, for k the keys of a
small batch (``lookup.PRUNE_KEYS``); both costs then grow with the square root of the
table, where the single-column orders make one of them grow with the table.

Delta's OPTIMIZE cannot sort by an expression (its Z-order interleaves the columns' bits, so
the column with more distinct values dominates), so the rewrite is a transaction of its own,
built the way OPTIMIZE builds its own: pinned to one snapshot and reading every file of it,
it writes the rows of that snapshot in the new order and commits the new files with
``dataChange = false`` beside the removal of exactly the files it read, as an ``OPTIMIZE``.
A concurrent commit that removes or changes one of those files (a batch's deletion vector,
a sweep) makes Delta refuse the commit, and the whole rewrite runs again; a concurrent
append passes, and its files stay. Readers of the change data feed and streaming readers
see no change; no row changes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

from ttl.errors import LayoutError
from ttl.store.lookup import PRUNE_KEYS

#: Rows sampled per group boundary's quantile (``percentile_approx``'s accuracy).
QUANTILE_ACCURACY = 10_000
#: The lookup size G is balanced for (a small batch's keys); tests lower it to get groups
#: on small tables.
GROUP_KEYS = PRUNE_KEYS


def expiry_groups(files: int, keys: int) -> int:
    """G for a table written as ``files`` files, looked up ``keys`` keys at a time."""
    return max(1, round(math.sqrt(files / max(1, keys))))


def group_bounds(frame, groups: int) -> list[int]:
    """The ``expires_at`` values that split ``frame``'s rows into ``groups`` groups of about
    equal size (fewer when many rows share a value); NULLs (never expire) are left out."""
    from pyspark.sql import functions as F

    if groups <= 1:
        return []
    fractions = [i / groups for i in range(1, groups)]
    found = frame.select(F.percentile_approx("expires_at", fractions, QUANTILE_ACCURACY)
                         ).first()[0]
    return sorted(set(found or []))


def ordered(frame, files: int, bounds: list[int]):
    """``frame``'s rows in ``files`` partitions: by expiry group (``bounds``; rows that
    never expire last), then by ``key_hash``, each partition sorted. One partition is one
    written file."""
    from pyspark.sql import functions as F

    group = F.when(F.col("expires_at").isNull(), F.lit(len(bounds) + 1))
    for i, bound in enumerate(bounds):
        group = group.when(F.col("expires_at") < F.lit(bound), F.lit(i))
    group = group.otherwise(F.lit(len(bounds)))
    columns = frame.columns
    return (frame.withColumn("_ttl_group", group)
            .repartitionByRange(max(1, files), "_ttl_group", "key_hash")
            .sortWithinPartitions("_ttl_group", "key_hash")
            .select(*columns))


def rewrite(spark, path: str, file_bytes: int, keys: int | None = None,
            before_commit: Callable[[], None] | None = None) -> dict[str, int]:
    """Rewrite the table at ``path`` in the ``both`` order, in files of about
    ``file_bytes``, as one OPTIMIZE commit that changes no row; raises Delta's conflict
    exceptions when another commit lands meanwhile (``delta_log.retrying`` runs it again).
    ``before_commit`` runs right before the commit (the store's lease check: a rewrite
    takes minutes on a big table). Returns what it did (files before and after, groups,
    version)."""
    jvm = spark.sparkContext._jvm
    log = jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, path)
    txn = log.startTransaction()
    version = int(txn.snapshot().version())
    config = jvm.scala.jdk.javaapi.CollectionConverters.asJava(
        txn.snapshot().metadata().configuration())
    if str(config.get("delta.enableRowTracking")).lower() == "true":
        raise LayoutError(f"{path}: maintenance.cluster_by = \"both\" rewrites the table "
                          "without keeping row tracking's row ids; take key_hash or "
                          "expires_at for a table with delta.enableRowTracking")
    old = txn.filterFiles()  # every file: a concurrent removal of one of them conflicts
    count = old.size()
    if count == 0:
        return {"files_before": 0, "files_after": 0, "groups": 0, "version": version}
    size = sum(int(old.apply(i).size()) for i in range(count))
    files = max(1, -(-size // file_bytes))
    groups = expiry_groups(files, GROUP_KEYS if keys is None else keys)
    frame = spark.read.format("delta").option("versionAsOf", version).load(path)
    bounds = group_bounds(frame, groups)
    data = ordered(frame, files, bounds)
    none = jvm.scala.Option.empty()
    empty = jvm.scala.jdk.javaapi.CollectionConverters.asScala(jvm.java.util.ArrayList()).toSeq()
    written = txn.writeFiles(data._jdf, none, True, empty)  # isOptimize: no optimized write
    action = jvm.org.apache.spark.sql.delta.actions.Action
    actions = jvm.java.util.ArrayList()
    added = 0
    for i in range(written.size()):
        doc = json.loads(written.apply(i).json())
        if "add" in doc:  # a rearrangement: readers of changes skip it
            doc["add"]["dataChange"] = False
            added += 1
        actions.add(action.fromJson(json.dumps(doc)))
    now = int(spark.sparkContext._jvm.System.currentTimeMillis())
    for i in range(count):
        actions.add(old.apply(i).removeWithTimestamp(now, False))
    operation = getattr(jvm.org.apache.spark.sql.delta, "DeltaOperations$Optimize")(
        empty, empty, False, none, False)
    if before_commit is not None:
        before_commit()
    committed = txn.commit(
        jvm.scala.jdk.javaapi.CollectionConverters.asScala(actions).toSeq(), operation)
    return {"files_before": count, "files_after": added, "groups": len(bounds) + 1,
            "version": int(committed)}
