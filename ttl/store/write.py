"""The batch write path: input records -> one Delta commit (docs/semantics.md, Write semantics).

Plan, per micro-batch (the records arrive as one Arrow table, the stream's one read):

1. **lookup** (``ttl.store.lookup``): the stored ts and expiry of the batch's keys at the
   version the write starts from (narrow columns: value and headers are never needed);
2. **fold** on the driver (``ttl.store.fold``: vectorized for a key's one plain record, the
   reference model itself for the rest): validation, per-key fold with T0, counts, the
   batch's max timestamp, the changed rows;
3. rejected records go to the dead-letter table (its own idempotent append);
4. **write**: one commit applies the per-key changes, carrying the commit metadata (stream
   time, T0, expired-on-arrival keys, the caller's input offsets) and, if given, the
   idempotent ``txnAppId``/``txnVersion``. Which write (``WriteResult.write``) follows from
   the changes:

   * ``append`` when the lookup found none of the batch's keys (every change is an insert);
   * ``replace`` when the batch upserts at least one key: Delta's replace (``replaceUsing``,
     or ``replaceOn`` when the batch also removes keys) deletes the stored rows of every
     changed key (upserted or removed) and inserts the upserts, with deletion vectors and no
     change files (the change feed is read from them; without deletion vectors it rewrites
     files and writes change files). It matches stored rows by ``key_hash`` alone when the
     lookup proved that this tells the keys' rows apart (``WriteResult.by_hash``), else by
     ``key_hash`` and ``key``;
   * ``replace_where`` when the batch upserts and changes at most ``lookup.PRUNE_KEYS``
     keys, and the files' ``key_hash`` statistics (read by the lookup) say naming them skips
     files (``WRITE_PRUNE_SHARE``): the same rows deleted and inserted, by a predicate that
     names the changed keys' hashes (``hash_predicate``), so Delta reads only the files that
     can hold them; and the keys themselves too (``key_predicate``) unless the lookup proved
     that the hashes tell their rows apart (``WriteResult.by_hash``);
   * ``positional`` instead of ``replace`` or ``replace_where`` (or ``merge``, below),
     when the batch's delta-rs lookup read the files' statistics, the files that can hold
     its keys have at most ``positional.MAX_ROWS`` rows and the table (local or on S3) has
     deletion vectors (``ttl.store.positional``):
     the same rows deleted and inserted, found by the driver in the row groups that can
     hold them and committed through Delta's transaction with two small Spark jobs (the
     touched files' entries, the insert) where Delta's own write runs about ten
     (``POSITIONAL_ENABLED`` switches it off);
   * ``merge`` when every change removes a key (a replace needs a row to insert); under the
     same condition its ON clause names the keys' hashes too, so it skips files as well (a
     MERGE commits even when it matches nothing, which a DELETE would not: the batch's
     metadata is always persisted);
   * ``empty``: a batch that changes no row still commits (a table-property change with the
     same metadata), so stream time and input offsets are always persisted.

The stored rows are read before the write; a store has one engine writer at a time (the
lease), and sweeps are serialized with batches in the same driver, but an operator's commit
can still land in between: the write starts only once the table's version is still the
lookup's, else the lookup and fold run again (``STALE_LOOKUPS``); everything the batch
writes before its commit (dead letters, a long expired-keys list) is inside what that
check covers. A commit after the write's Delta transaction read the table that Delta finds
in conflict with it (one that removed or changed a file the write read) makes the whole
batch run again. Between that check and the transaction's read (the write's frame and
plan: milliseconds) nothing checks: Delta's writers take no expected version. A commit
landing there is named in a warning (``unchecked_versions``) and in
``WriteResult.unchecked`` (docs/semantics.md, Single writer and the lease). The
changed rows are handed back (``keep_changes``) when they provably equal the commit's change
feed (the commit carrying this write's id is the version right after the lookup's), so the
publisher need not read it back.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from ttl import commit, delta_log
from ttl.errors import PositionalUnsupported, StaleLookup
from ttl.java import loaded
from ttl.model import Counts, Semantics
from ttl.names import EXPIRED_KEYS_SUFFIX, OP_DEAD_LETTERS, PROP_LAST_NOOP_BATCH, sibling
from ttl.phases import BatchPhases
from ttl.store import positional
from ttl.store.fold import batch_keys, fold_table
from ttl.store.layout import (
    ensure_expired_keys_table,
    hash_identifies_keys,
    key_hashes,
    set_properties,
)
from ttl.store.lookup import PRUNE_KEYS, Lookup, may_hold

__all__ = ["WriteResult", "append_dead_letters", "append_expired_keys", "append_rows",
           "at_stable_version", "commit_write", "empty_commit", "final_metadata",
           "merge_into", "rejected_wall", "replace_rows", "write_batch", "write_kind"]

log = logging.getLogger(__name__)
T = TypeVar("T")

#: How many times a batch looks up and folds again when commits land after its lookup.
STALE_LOOKUPS = 5


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
    #: The rows the commit changed (``keep_changes``): Arrow, or rows the executors hold
    #: (``distributed.HeldChanges``).
    changes: object = None
    retries: int = 0  # runs again after a Delta conflict with a concurrent commit
    write: str = ""  # the write that made the commit: append, replace, replace_where, merge,
    # empty; or skipped
    #: Whether a replace (or ``replace_where``) matched the stored rows by ``key_hash``
    #: alone (``layout.hash_identifies_keys``), not by ``key_hash`` and ``key``.
    by_hash: bool = False
    #: The versions (first, last) that landed after the batch's last version check and
    #: before its write read the table: checked against the batch by neither (a warning
    #: names them; ``unchecked_versions``).
    unchecked: tuple[int, int] | None = None


#: Rows per task (and so per file) of a batch's write. Spark splits a DataFrame of the
#: driver's Arrow rows into min(rows, ``spark.default.parallelism``) partitions (above
#: ``spark.sql.execution.arrow.localRelationThreshold``, 48 MB, into one per Arrow record
#: batch of at most 10,000 rows), so a trickle's batch of 30 rows wrote 4 files of 8 rows in
#: 4 tasks: the task overhead is most of such a write, and the files pile up (4 a second on
#: a 1 s trigger) for every later snapshot and lookup to list and read. A batch gets one
#: task per this many rows.
ROWS_PER_TASK = 50_000


def frame(spark, rows):
    """The DataFrame of Arrow ``rows`` a write takes: ``ROWS_PER_TASK`` rows per partition
    (a coalesce: no shuffle, and never more partitions than Spark gave them)."""
    return spark.createDataFrame(rows).coalesce(max(1, -(-rows.num_rows // ROWS_PER_TASK)))


def _write_dead_letters(spark, rejects, dead_letter_path: str, wall_ms: int,
                        txn: tuple[str, int] | None) -> None:
    import pyarrow as pa

    # rejected_at in Arrow: Spark then has no column to compute over the driver's rows
    # (``layout.key_hashes`` says why that matters).
    append_dead_letters(frame(spark, rejects.append_column(
        "rejected_at", pa.repeat(pa.scalar(wall_ms, pa.int64()), rejects.num_rows))),
        dead_letter_path, txn, wall_ms)


def append_dead_letters(rejected, dead_letter_path: str, txn: tuple[str, int] | None,
                        wall_ms: int) -> None:
    """Append a batch's dead letters (a DataFrame in the dead-letter table's columns) under
    the batch's own idempotent id, so a batch that runs again does not add them twice; the
    commit says which batch and wall clock rejected them (``rejected_wall``)."""
    writer = rejected.write.format("delta").mode("append")
    if txn is not None:
        writer = (writer.option("txnAppId", f"{txn[0]}:dead-letters")
                  .option("txnVersion", txn[1])
                  .option("userMetadata", commit.encode(
                      {"op": OP_DEAD_LETTERS, "txn": [txn[0], txn[1]], "wall": wall_ms})))
    writer.save(dead_letter_path)


def rejected_wall(spark, dead_letter_path: str, txn: tuple[str, int]) -> int | None:
    """The wall clock at which an earlier run of batch ``txn`` committed its dead letters,
    if one did (and then failed before the batch's own commit: a crash, a lost lease,
    conflicts out of retries); else ``None``.

    The batch runs again at that wall clock. Whether a record is rejected depends on it
    (the future-timestamp rule: ``ts > wall + store.max_future``), and the dead letters of
    the run again are skipped as already written (their txn id): at another wall clock the
    store would keep a record the dead letters hold too (a later clock), or one rejected
    only now would be in neither (an earlier one: another driver's clock, a clock set
    back). Reads the dead-letter table's commit files newest first (at most
    ``delta_log.DIRECT_READS``; no Spark job; at a stream's first batch, ``DeltaStore``)
    down to the newest dead letters of the batch's query (its txn app id): only those can
    be a failed run's, since a stream goes on past a batch only once the batch has
    committed. Another query's (or another store's, sharing the table) are passed over."""
    for found in delta_log.newest_commits(spark, dead_letter_path):
        meta = found.metadata or {}
        written = meta.get("txn") if meta.get("op") == OP_DEAD_LETTERS else None
        if written and written[0] == txn[0]:
            return int(meta["wall"]) if written[1] == txn[1] else None
    return None


#: Up to this many expired-on-arrival keys travel in the batch commit's metadata
#: (``expired_keys``: their hex, so the changelog tags their tombstones ``ttl.op=expire``).
#: More, after a long outage say, would make every commit's metadata (and the session
#: setting Spark ships with every task) megabytes: they go to the store's expired-keys
#: table under the write's id, before the commit, and the metadata says so
#: (``EXPIRED_KEYS_ASIDE``). A write that fails and runs again leaves its rows there
#: under an id no commit carries: never read.
EXPIRED_KEYS_INLINE = 1_000
EXPIRED_KEYS_ASIDE = "table"


def _write_expired_keys(spark, path: str, write_id: str, hex_keys: list[str],
                        wall_ms: int) -> None:
    import pyarrow as pa

    keys = frame(spark, pa.table({"key": pa.array([bytes.fromhex(k) for k in hex_keys],
                                                  pa.binary())}))
    append_expired_keys(spark, path, write_id, keys, wall_ms)


def append_expired_keys(spark, path: str, write_id: str, keys, wall_ms: int) -> None:
    """Put a write's expired-on-arrival keys (a DataFrame of ``key``) in the store's
    expired-keys table under its id (``EXPIRED_KEYS_INLINE``)."""
    from pyspark.sql import functions as F

    ensure_expired_keys_table(spark, path)
    (keys.select(F.lit(write_id).alias("write_id"), "key",
                 F.lit(wall_ms).cast("bigint").alias("written_at"))
     .write.format("delta").mode("append").save(path))


def expired_keys(spark, store_path: str, meta: dict) -> list[str]:
    """The hex keys a batch commit's metadata says it removed as expired on arrival: its
    list, or its rows in the expired-keys table (``EXPIRED_KEYS_INLINE``)."""
    listed = meta.get("expired_keys") or []
    if listed != EXPIRED_KEYS_ASIDE:
        return list(listed)
    from pyspark.sql import functions as F

    rows = (spark.read.format("delta").load(sibling(store_path, EXPIRED_KEYS_SUFFIX))
            .where(F.col("write_id") == meta["write_id"]).select(F.hex("key").alias("k"))
            .collect())
    return [r.k.lower() for r in rows]


def _merge(spark, path: str, changes, wall_ms: int, named: bool = False) -> None:
    # MERGE keeps its default source materialization: measured, turning it off (the source
    # is the driver's Arrow rows, deterministic) made the rewrite slower, not faster (1M
    # keys, 100k updates: rewrite 5.4 s against 3.9-4.6 s), the Arrow rows being decoded
    # again for each pass over the source.
    hashed = _hashed(changes)
    merge_into(spark, path, frame(spark, hashed), wall_ms,
                target=hash_predicate(hashed, "t.key_hash") if named else None)


def merge_into(spark, path: str, changes, wall_ms: int, target: str | None = None) -> None:
    """MERGE ``changes``; ``target``: a condition on the target's own columns, literals
    only, that Delta skips files by (a MERGE prunes by no other part of its ON clause)."""
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    on = "t.key_hash = s.key_hash AND t.key = s.key"
    (
        DeltaTable.forPath(spark, path).alias("t")
        .merge(changes.alias("s"), on if target is None else f"({target}) AND {on}")
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


def _hashed(changes):
    """The fold's changes (Arrow) with the table's ``key_hash`` (``layout.key_hashes``)."""
    return changes.append_column("key_hash", key_hashes(changes["key"]))


def _table_rows(hashed, wall_ms: int):
    """The upserts of ``_hashed`` changes as the store table's rows (its columns, in its
    order), in Arrow: Spark writes them as they come, with no column left to compute on
    the driver (``layout.key_hashes`` says why that matters)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rows = hashed.filter(pc.equal(hashed["kind"], "upsert"))
    return pa.table({
        "key": rows["key"], "value": rows["value"], "ts": rows["ts"],
        "headers": rows["headers"], "expires_at": rows["expires_at"],
        "updated_at": pa.repeat(pa.scalar(wall_ms, pa.int64()), rows.num_rows),
        "key_hash": rows["key_hash"], "record_ttl": rows["record_ttl"]})


def _append(spark, path: str, changes, wall_ms: int) -> None:
    """Every change inserts a key the table does not hold (the lookup found none of the
    batch's keys, at the version the write starts from): a blind append gives the MERGE's
    exact table and change feed (the same inserts) without scanning the table for matches."""
    append_rows(frame(spark, _table_rows(_hashed(changes), wall_ms)), path)


def append_rows(rows, path: str) -> None:
    """Append table rows (a DataFrame in the store table's columns: ``_append``)."""
    rows.write.format("delta").mode("append").save(path)


def _removes(changes) -> bool:
    import pyarrow.compute as pc

    return bool(pc.any(pc.equal(changes["kind"], "delete")).as_py())


def _replace(spark, path: str, changes, wall_ms: int, by_hash: bool = False) -> None:
    """The batch upserts at least one key: one commit of Delta's replace (Delta 4.3+)
    deletes the stored row of every changed key, upserted or removed, and inserts the
    upserts' new rows. That is the MERGE's table (an upsert sets every column, a removal
    deletes the row, the fold gives one row per key, so nothing is inserted twice), for
    about half its time: one pass over the table instead of the MERGE's three (find the
    touched files, write the changes with their pre- and post-images, write the deletion
    vectors), and with deletion vectors no change files (the version's change feed is read
    from its deletion vectors and new files; without them the replace rewrites the touched
    files and writes change files, like a MERGE). Measured on 1M keys, 100k changes with 1%
    deletes: 2.7-4.1 s against the MERGE's 7.4-7.5 s (upserts only: 2.7-4.3 s). The change
    feed says ``delete`` + ``insert`` for an updated key, which the publisher takes as the
    put it is (a version's last state of a key wins), and ``delete`` for a removed one.

    Without removals it is the replace by key (``replaceUsing`` on ``key_hash``, or
    ``key_hash, key``: ``replace_rows``). With them, ``replaceOn``: Delta deletes a stored
    row when some inserted row meets the condition, and this condition names only the stored
    row (its ``key_hash``, or ``key_hash, key``, among the batch's changed keys, a temporary
    view), so with at least one upsert to insert it holds
    exactly for the changed keys' stored rows, removals included. That sub-query inside the
    condition is what Delta 4.4 runs but does not document, so only batches with removals
    depend on it. ``by_hash``: see ``replace_rows``."""
    hashed = _hashed(changes)
    keys = spark.createDataFrame(hashed.select(["key_hash", "key"])) if _removes(changes) else None
    replace_rows(spark, path, frame(spark, _table_rows(hashed, wall_ms)), keys, by_hash)


#: What a replace matches stored rows by: ``key_hash`` alone when it tells the batch's keys
#: apart (``layout.hash_identifies_keys``), else the hash and the key. By the hash alone the
#: delete scans one 8-byte column and probes a hash table of longs instead of binary rows:
#: measured through ``tests.bench.big_state`` (10M keys in 100 files by ``key_hash``, 100k
#: uniform updates), the write phase 1.93-2.04 s against 2.61-2.74 s (docs/performance.md).
MATCH_COLUMNS = {True: ("key_hash",), False: ("key_hash", "key")}


def replace_rows(spark, path: str, rows, removed_too=None, by_hash: bool = False) -> None:
    """``_replace`` of table rows (a DataFrame in the store table's columns); with
    ``removed_too`` (a DataFrame of every changed key's ``key_hash, key``, the removed ones
    included), ``replaceOn`` deletes the stored rows of those keys, else ``replaceUsing``
    those of the rows' own keys. ``by_hash``: match the stored rows by ``key_hash`` alone,
    which only a lookup that proved it tells them apart may ask (``MATCH_COLUMNS``)."""
    columns = ", ".join(MATCH_COLUMNS[by_hash])
    if removed_too is None:
        (rows.write.format("delta").mode("overwrite")
         .option("replaceUsing", columns).save(path))
        return
    view = f"ttl_changed_keys_{uuid.uuid4().hex}"
    removed_too.createOrReplaceTempView(view)
    target = ", ".join(f"t.{c}" for c in MATCH_COLUMNS[by_hash])
    try:
        (rows.write.format("delta").mode("overwrite").option("targetAlias", "t")
         .option("replaceOn", f"({target}) IN (SELECT {columns} FROM {view})")
         .save(path))
    finally:
        spark.catalog.dropTempView(view)


#: A small batch's write names its keys only when the files' statistics say it then reads
#: at most this share of the table's bytes (``lookup.read_share``). Delta's ``replace``
#: reads every file, whatever the batch, but it is the cheaper write where the named keys
#: would not skip files (measured, 20 changed keys: on 10M keys in 100 files sorted by
#: ``key_hash``, 1.26 s against the replace's 2.31 s, write phase, median of 5
#: interleaved; on 1M keys in 10 files, which 20 keys all touch, 10-20% slower than the
#: replace). Past ``lookup.PRUNE_KEYS`` keys the predicate itself is the cost (200 keys,
#: 10M in 500 files: 6.1 s against 3.3 s; Spark gives up generating code for it).
WRITE_PRUNE_SHARE = 0.5
#: Keys may be named in the predicate as literals (``key_predicate``, when their hashes do
#: not tell them apart), which Delta keeps in the commit's ``operationParameters`` in its
#: log: past this many bytes of keys, the batch takes the replace instead (decided before
#: the write knows whether it will name them, so it applies to every small batch).
WRITE_PRUNE_KEY_BYTES = 4 * 1024
#: Delta's switch for ``replaceWhere`` on data columns (on by default; off, the write would
#: only match partition columns, so a pruned write is never chosen).
REPLACE_WHERE_ENABLED = "spark.databricks.delta.replaceWhere.dataColumns.enabled"


def hash_predicate(hashed, column: str = "key_hash") -> str:
    """``hashed``'s ``key_hash`` values as an ``OR`` of equalities: Delta tests each against
    a file's statistics, where an ``IN`` list would be one min-max range."""
    return " OR ".join(f"{column} = {h}" for h in sorted(set(hashed["key_hash"].to_pylist())))


def key_predicate(hashed) -> str:
    """The SQL predicate that holds exactly for the stored rows of ``hashed``'s keys: their
    hashes (``hash_predicate``, which files are skipped by) and the keys themselves, since
    two keys may share a hash. The keys are hex literals, and so they are in the commit's
    ``operationParameters`` in the Delta log (``WRITE_PRUNE_KEY_BYTES`` bounds them)."""
    keys = ", ".join(f"X'{k.hex()}'" for k in hashed["key"].to_pylist())
    return f"({hash_predicate(hashed)}) AND key IN ({keys})"


def _names_keys(changes) -> bool:
    """Whether a write may name the batch's changed keys: at most ``PRUNE_KEYS`` of them,
    in at most ``WRITE_PRUNE_KEY_BYTES``."""
    import pyarrow.compute as pc

    return (changes.num_rows <= PRUNE_KEYS
            and (pc.sum(pc.binary_length(changes["key"])).as_py() or 0) <= WRITE_PRUNE_KEY_BYTES)


def _prunes(spark, changes, share: float | None) -> bool:
    """Whether Delta's write of the batch names its keys (``WRITE_PRUNE_SHARE``)."""
    return (share is not None and share <= WRITE_PRUNE_SHARE and _names_keys(changes)
            and spark.conf.get(REPLACE_WHERE_ENABLED, "true").strip().lower() == "true")


def _replace_where(spark, path: str, changes, wall_ms: int, by_hash: bool = False) -> None:
    """The replace of a few keys that Delta can skip files for: ``replaceWhere`` with
    ``key_predicate`` deletes exactly the changed keys' stored rows and inserts the
    upserts' rows (which meet the predicate, as Delta checks), in one commit. ``by_hash``
    (the lookup proved that the hashes tell the keys' rows apart): ``hash_predicate``
    alone, which deletes the same rows; Delta then evaluates no binary comparison per row
    and its log holds no key, only hashes (measured, 20 updates on 10M keys in 100 files
    by ``key_hash``: the write phase 1.13 -> 1.02 s, median of 6 alternated)."""
    hashed = _hashed(changes)
    predicate = hash_predicate(hashed) if by_hash else key_predicate(hashed)
    (frame(spark, _table_rows(hashed, wall_ms)).write.format("delta").mode("overwrite")
     .option("replaceWhere", predicate).save(path))


#: The writes that may match stored rows by ``key_hash`` alone (``WriteResult.by_hash``).
BY_HASH_WRITES = ("replace", "replace_where", "positional")
#: ttl's own switch for the replace by position (``ttl.store.positional``) of a batch that
#: Delta would write with its replace, ``replaceWhere`` or a MERGE; off, Delta's write runs.
POSITIONAL_ENABLED = "spark.ttl.write.positional.enabled"


def positional_enabled(spark) -> bool:
    """Whether ``POSITIONAL_ENABLED`` is on (the default). Measured, ttl's replace by
    position against Delta's write, batch and write phase, medians of alternated pairs
    (``tests.bench.big_state --vs-delta-write``, 2026-11-30): 20 updates on 10M keys,
    0.54 / 0.24 s against 1.14 / 0.80 s; 100,000 uniform updates on 1M keys 1.11 / 0.63 s
    against 1.78 / 1.25 s, on 10M keys 1.61 / 0.74 s against 2.82 / 1.87 s. Its bound is
    the rows the driver reads (``positional.MAX_ROWS``)."""
    return spark.conf.get(POSITIONAL_ENABLED, "true").strip().lower() == "true"


def _positional_rows(spark, path: str, version: int, lookup: Lookup, changes, kind: str,
                     by_hash: bool) -> tuple[dict, object] | None:
    """The stored rows a replace by position (``ttl.store.positional``) of the batch would
    delete (``positional.find_rows``), and the changes with their ``key_hash``
    (``_hashed``, for its write: the keys are hashed once), when it may take one instead of
    Delta's ``kind``: a replace or a MERGE, after a lookup that read the files' statistics
    at ``version``, on a table that supports it; else ``None``."""
    import pyarrow.compute as pc

    if kind not in ("replace", "replace_where", "merge"):
        return None
    files = lookup.files_at(path, version)
    if files is None or not positional_enabled(spark):
        return None
    hashed = _hashed(changes)
    hashes = np.sort(pc.unique(hashed["key_hash"]).to_numpy())
    read = may_hold(files, hashes)
    touched = positional.rows_to_delete(
        spark, path, version, files, read,
        lambda: positional.find_rows(path, files, hashes,
                                     None if by_hash else changes["key"], lookup.options, read),
        lookup.options, "Delta's write")
    return None if touched is None else (touched, hashed)


def _by_position(spark, path: str, version: int, hashed, wall_ms: int,
                 txn: tuple[str, int] | None, touched: dict, result: WriteResult,
                 by_hash: bool, delta_write: Callable[[], None]) -> Callable[[], None]:
    """The write of ``_replace_where``'s rows (``hashed``: the changes with their
    ``key_hash``), deleted and inserted by
    ``positional.replace_by_position``: ``touched`` found by the same predicate (the keys'
    hashes, and the keys unless ``by_hash``), which the commit records. Should Delta's
    snapshot not hold a file ``touched`` names (it and delta-rs disagree), ``delta_write``
    (the write Delta would have made) instead, which ``result`` then names."""
    kind, delta_by_hash = result.write, result.by_hash

    def write() -> None:
        # What the commit records: the predicate of a few keys, as ``replaceWhere``
        # records it; for more, the columns it matched by, as ``replaceUsing`` does.
        named = _names_keys(hashed)
        predicate = (hash_predicate(hashed) if by_hash else key_predicate(hashed)) if named \
            else None
        rows = _table_rows(hashed, wall_ms)
        try:
            positional.replace_by_position(
                spark, path, version, touched, frame(spark, rows) if rows.num_rows else None,
                predicate, txn, None if named else ", ".join(MATCH_COLUMNS[by_hash]))
        except PositionalUnsupported as exc:  # raised before anything is written
            log.warning("%s: Delta's write instead of a replace by position: %s", path, exc)
            result.write, result.by_hash = kind, delta_by_hash
            delta_write()
    return write


def _upserts(changes) -> bool:
    import pyarrow.compute as pc

    return bool(pc.any(pc.equal(changes["kind"], "upsert")).as_py())


#: Delta's (internal) switches for ``replaceUsing`` and ``replaceOn`` in DataFrame writes;
#: off, the write fails, so the batch is a MERGE instead.
REPLACE_USING_ENABLED = "spark.databricks.delta.replaceUsing.dataframe.writer.enabled"
REPLACE_ON_ENABLED = "spark.databricks.delta.replaceOn.dataframe.writer.enabled"


def replace_supported(spark, removes: bool = False) -> bool:
    """Whether the JVM's Delta has the replace in DataFrame writes (4.3+: the command class
    came with it) and the option the batch needs (``replaceOn`` with removals, else
    ``replaceUsing``) is not switched off. A Delta before 4.3 ignores the options in
    ``save()`` and would overwrite the whole table, so without it every batch that is not
    an append is a MERGE."""
    global _REPLACE_SUPPORTED
    if _REPLACE_SUPPORTED is None:
        _REPLACE_SUPPORTED = loaded(
            spark, "org.apache.spark.sql.delta.commands.DeltaInsertReplaceOnOrUsingCommand"
        ) is not None
    switch = REPLACE_ON_ENABLED if removes else REPLACE_USING_ENABLED
    return _REPLACE_SUPPORTED and spark.conf.get(switch, "true").strip().lower() == "true"


_REPLACE_SUPPORTED: bool | None = None  # per process: one JVM, one Delta


def empty_commit(spark, path: str, meta: dict, txn: tuple[str, int] | None = None) -> None:
    """A commit with no data change, so an all-no-op batch still persists its stream time and
    input offsets. Under a batch's idempotent id (``txn``, set by ``commit_settings``) an
    append of no row: Delta records it for its ``SetTransaction`` alone, and skips it when
    the batch runs again after its commit (a table-property change would be committed a
    second time: Delta checks the txn id only on writes, DELETE, UPDATE and MERGE). Without
    one, a table-property change that carries the batch's metadata (Delta makes no commit
    for an empty append without a txn id). It leaves the stream-time floor alone: the floor
    is kept from the log (``DeltaStore.raise_stream_time_floor``), and a writer whose own
    stream time is behind could lower it."""
    if txn is not None:
        (spark.read.format("delta").load(path).limit(0)
         .write.format("delta").mode("append").save(path))
        return
    set_properties(spark, path, {PROP_LAST_NOOP_BATCH: str(meta["wall"])})


#: The write's Delta ``operationMetrics`` the batch log line carries (what it scanned,
#: rewrote and copied: the cost of a MERGE follows these, not the batch size; an append's
#: are its output rows, files and bytes).
LOGGED_METRICS = ("numOutputRows", "numFiles", "numOutputBytes",
                  "numSourceRows", "numTargetFilesAdded", "numTargetFilesRemoved",
                  "numTargetRowsCopied", "numTargetDeletionVectorsAdded", "numTargetBytesAdded",
                  "numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted",
                  "scanTimeMs", "rewriteTimeMs", "executionTimeMs")
#: A replace's: its deleted rows (the stored rows of its keys) and change files (none with
#: deletion vectors). Its output rows, files, bytes, removed files and copied rows count
#: the whole files its deletion vectors touched, which are not rewritten, so they are left
#: out (the rows it inserted are the batch line's ``upserted`` keys).
REPLACE_METRICS = ("numDeletedRows", "numAddedChangeFiles")


def write_kind(spark, *, changes: bool, stored: bool, upserts: bool, removes: bool,
               names_keys: bool = False) -> str:
    """The write that applies a batch's changes (module docstring, step 4) onto the table
    at the lookup's version (``at_stable_version``): ``changes``, whether it changes a
    row; ``stored``, whether the lookup found a stored row of its keys; ``upserts`` and
    ``removes``, what its changes do; ``names_keys``, whether its write names its keys
    (``_prunes``)."""
    if not changes:
        return "empty"
    if not stored:
        return "append"
    if upserts and names_keys:
        return "replace_where"
    return "replace" if upserts and replace_supported(spark, removes) else "merge"


def _write_kind(spark, changes, stored, share: float | None = None) -> str:
    """``write_kind`` of the driver's fold; ``share``: of the table's bytes at the lookup's
    version, the share in files that may hold a changed key (``lookup.read_share``;
    ``None``: unknown)."""
    upserts = bool(changes.num_rows) and _upserts(changes)
    return write_kind(spark, changes=bool(changes.num_rows), stored=bool(stored.num_rows),
                      upserts=upserts, removes=bool(changes.num_rows) and _removes(changes),
                      names_keys=upserts and _prunes(spark, changes, share))


def at_stable_version(spark, path: str, attempt: Callable[[int], T],
                      fence: Callable[[], None] | None = None) -> tuple[T, int]:
    """Run ``attempt(version)`` (a batch's lookup and fold at the table's latest version)
    until no commit landed meanwhile; returns its outcome and that version.

    Delta's writers take no expected version: a commit that landed after the lookup (an
    operator's DELETE, another process's sweep) would be overwritten by a fold computed
    without it, so the lookup and fold run again on the new version. A commit after the
    lookup (a fence's too) shows here: the next attempt checks ``fence`` again (first: a
    removed table or a lost lease is named there), then looks up again."""
    for _attempt in range(STALE_LOOKUPS + 1):
        if fence is not None:
            fence()
        version = delta_log.latest_version(spark, path)
        outcome = attempt(version)
        now = delta_log.latest_version(spark, path)
        if now == version:
            return outcome, version
        log.info("%s: version %s landed after the batch's lookup at %s; looking up again",
                 path, now, version)
    raise StaleLookup(f"{path}: other commits kept landing between the batch's lookup and "
                      f"its write ({STALE_LOOKUPS + 1} tries)")


def final_metadata(metadata: dict, max_ts: int | None, *, t0: int, wall_ms: int,
                   expired_keys: list[str] | str) -> dict:
    """The batch commit's metadata: the caller's, with stream time raised to the batch's
    largest timestamp, the batch clock, its expired-on-arrival keys and the write's id."""
    before = metadata.get("stream_time")
    after = before if max_ts is None else (max_ts if before is None else max(before, max_ts))
    return {**metadata, "stream_time": after, "t0": t0, "wall": wall_ms,
            "expired_keys": expired_keys, "write_id": uuid.uuid4().hex}


def unchecked_versions(written: delta_log.Commit,
                       checked: int | None) -> tuple[int, int] | None:
    """The versions that landed between a batch's last check of the table's version
    (``checked``: its lookup's, which ``at_stable_version`` confirmed) and the snapshot its
    write's Delta transaction read (``written.read_version``), as (first, last); ``None``
    when there are none. Delta checks a commit for conflicts only against the commits after
    the version its transaction read, and the batch's fold saw none after ``checked``: a
    commit in between (possible only from a writer beside the engine, which holds the
    lease) is checked by neither."""
    if checked is None or written.read_version is None or written.read_version <= checked:
        return None
    return checked + 1, written.read_version


def commit_write(spark, path: str, result: WriteResult, meta: dict,
                 txn: tuple[str, int] | None, write: Callable[[], None]) -> None:
    """Make the batch's commit with ``write`` (the write ``result.write`` names) under the
    batch's metadata and idempotent id, then say in ``result`` whether it committed, at
    which version and with which Delta metrics."""
    with commit.commit_settings(spark, meta, txn):
        write()
    # Our commit is the one carrying this write's id: a replay skipped by its txn id
    # makes none, and another writer's commit in the meantime is not ours.
    written = delta_log.find_commit(spark, path, op=meta.get("op"), key="write_id",
                                    value=meta["write_id"], since=result.version_before)
    result.applied = written is not None
    result.version = (written.version if written is not None
                      else delta_log.latest_version(spark, path))
    if written is not None:
        if result.write != "empty":  # a property change: no row of anyone's to overwrite
            result.unchecked = unchecked_versions(written, result.version_before)
        if result.unchecked:
            first, last = result.unchecked
            log.warning(
                "%s: version(s) %s-%s landed after the batch's last check of the table's "
                "version (%s) and before its write read the table (at %s): Delta checked "
                "the batch's commit %s against none of them, and its fold did not see them. "
                "If one of them wrote one of the batch's keys (another writer beside the "
                "engine), that write may be overwritten by the batch's",
                path, first, last, result.version_before, written.read_version,
                written.version)
        logged = (REPLACE_METRICS if result.write in BY_HASH_WRITES
                  else LOGGED_METRICS)
        result.metrics = {k: int(v) for k, v in written.metrics.items() if k in logged}
    else:
        result.write = "skipped"  # a replay: Delta's txn id skipped it, nothing written
        result.by_hash = False


def write_batch(spark, path: str, dead_letter_path: str, records, *, sem: Semantics,
                wall_ms: int, t0: int, metadata: dict,
                txn: tuple[str, int] | None = None, phases=None,
                keep_changes: bool = False, done: set[str] | None = None,
                lookup: Lookup | None = None,
                fence: Callable[[], None] | None = None,
                settle: Callable[[], None] | None = None) -> tuple[WriteResult, dict]:
    """Apply ``records`` (an Arrow table in ``fold.input_arrow_schema()``) in one store
    commit; returns the result and the final metadata.

    ``metadata`` must already hold the stream time *before* the batch under
    ``stream_time``; it is raised to include this batch's records before committing.
    ``phases`` (a ``ttl.phases.BatchPhases``) times the steps. With ``keep_changes`` the
    result carries the rows the commit changed (``WriteResult.changes``, Arrow) when they
    provably equal its change data feed: the commit carrying this write's id is the version
    right after the one the lookup read. ``done`` carries what an earlier attempt of this
    batch already wrote (its dead letters: the same records are rejected again) across a
    run again after a conflict. ``lookup`` reads the stored rows (default: ``Lookup()``).
    ``fence`` raises when this process may no longer commit (the store's lease, checked
    right before the write, and again by a retry). ``settle`` waits for the store's
    background snapshot of the previous commit (``DeltaStore.settle``), which only the write
    needs: it is called after a delta-rs lookup and the fold, so they overlap it (before a
    Spark lookup), and before the batch's dead letters and write and before
    ``at_stable_version`` checks the version again (phase ``snapshot_wait``). Measured,
    100k uniform updates, alternated: 2.01 -> 1.87 s a batch on 1M keys, 2.59 -> 2.46 s
    on 10M; within the noise of ``tests.bench.big_state`` on these 2 cores, where the
    lookup shares them with the snapshot's job (docs/performance.md).
    """
    done = set() if done is None else done
    phases = phases or BatchPhases()
    lookup = lookup or Lookup()
    keys = batch_keys(records)

    def settled() -> None:
        if settle is not None:
            with phases.phase("snapshot_wait"):
                settle()

    def attempt(version: int):
        spark_lookup = not lookup.uses_delta_rs(path)
        if spark_lookup:  # Spark's jobs run after the snapshot's, never beside them
            settled()
        with phases.phase("lookup"):
            stored = lookup(spark, path, keys, version)
        with phases.phase("fold"):
            folded = fold_table(records, stored, wall_ms, t0, sem)
        if not spark_lookup:  # before the version is checked again: no wider gap
            settled()
        if folded.rejects.num_rows and "dead_letters" not in done:
            with phases.phase("dead_letters"):  # the same records are rejected every time
                _write_dead_letters(spark, folded.rejects, dead_letter_path, wall_ms, txn)
            done.add("dead_letters")
        # In the attempt, so the version check after it covers this write too (a stale
        # attempt's rows carry a write id no commit has: the publisher never reads them).
        final_meta = final_metadata(metadata, folded.max_ts, t0=t0, wall_ms=wall_ms,
                                    expired_keys=folded.expired_keys)
        if len(folded.expired_keys) > EXPIRED_KEYS_INLINE:
            with phases.phase("expired_keys"):
                _write_expired_keys(spark, sibling(path, EXPIRED_KEYS_SUFFIX),
                                    final_meta["write_id"], folded.expired_keys, wall_ms)
            final_meta["expired_keys"] = EXPIRED_KEYS_ASIDE
        return stored, folded, final_meta

    (stored, folded, final_meta), version_before = at_stable_version(spark, path, attempt,
                                                                     fence)
    result = WriteResult(folded.counts, folded.max_ts, rows_upserted=folded.upserted,
                         rows_deleted=folded.deleted, rows_expired=folded.expired,
                         rejected_by_reason=folded.counts.rejected,
                         earliest_expiry=folded.earliest_expiry,
                         version_before=version_before)
    with phases.phase("write"):
        changes = folded.changes
        share = lookup.share_to_read(path, version_before, changes["key"])
        result.write = _write_kind(spark, changes, stored, share)
        # The lookup found every stored row sharing a hash with a batch key (``Lookup``).
        identifies = result.write in ("replace", "replace_where", "merge") and (
            hash_identifies_keys(keys, key_hashes(keys), stored["key"], stored["key_hash"]))
        result.by_hash = result.write in BY_HASH_WRITES and identifies
        writes = {
            "append": lambda: _append(spark, path, changes, wall_ms),
            "replace": lambda: _replace(spark, path, changes, wall_ms, result.by_hash),
            "replace_where": lambda: _replace_where(spark, path, changes, wall_ms,
                                                    result.by_hash),
            "merge": lambda: _merge(spark, path, changes, wall_ms,
                                    named=_prunes(spark, changes, share)),
            "empty": lambda: empty_commit(spark, path, final_meta, txn),
        }
        found = _positional_rows(spark, path, version_before, lookup, changes, result.write,
                                 identifies)
        if found is not None:
            touched, hashed = found
            writes["positional"] = _by_position(spark, path, version_before, hashed, wall_ms,
                                                txn, touched, result, identifies,
                                                writes[result.write])
            result.write, result.by_hash = "positional", identifies
        commit_write(spark, path, result, final_meta, txn, writes[result.write])
    if keep_changes and result.applied and result.version == version_before + 1:
        result.changes = changes.select(["kind", "key", "value", "ts", "headers", "record_ttl"])
    return result, final_meta
