"""The batch's lookup: what the fold needs of the stored rows of the batch's keys.

Only the narrow columns (``fold.STORED_COLUMNS``: key, ts, expiry, per-record TTL; value and
headers are never needed), of exactly the version the write starts from. Rows are found by
``key_hash``: every stored row that shares a hash with one of the batch's keys, so a row of
another key with the same hash (a collision) is found too. The fold takes only its own
keys' rows; the write deletes by ``key_hash`` alone when no such row was found and no two
of the batch's keys share a hash (``layout.hash_identifies_keys``), which is what makes a
large batch's replace cheap.

Two readers give the same rows:

- **delta-rs** (the ``deltalake`` package, DataFusion; deletion vectors applied), in the
  driver's process. Measured (``tests.bench.store_bench``, 200k and 1M keys): 20-60 ms for a
  handful of keys and 0.07-0.4 s for 100k, against 0.35-1.7 s with Spark, whose scan is
  planned, run as several jobs (file filtering, snapshot state) and collected every batch.
  The scan streams the table's narrow columns in Arrow batches and keeps only the batch's
  keys, so the driver's memory does not grow with the table. Used for a table on the local
  file system or on S3 (with the store's S3A settings as delta-rs's options,
  ``ttl.delta_rs``).
- **Spark**: a filter on the keys' ``key_hash`` values for a small batch, a broadcast
  semi-join on ``key_hash`` for a large one. Used elsewhere, by choice (``store.lookup``), and
  if delta-rs cannot read the table (a Delta feature it does not support): the store falls
  back to it for good, with a warning.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping
from itertools import accumulate
from urllib.parse import urlparse

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ttl import delta_log, delta_rs
from ttl.names import S3_SCHEMES, local_path
from ttl.store.fold import STORED_COLUMNS, stored_arrow_schema
from ttl.store.layout import key_hashes

log = logging.getLogger(__name__)

__all__ = ["GIVE_UP_AFTER", "HOW", "LOOKUP_IN_LIST", "HashSet", "Lookup", "found_schema",
           "in_ranges", "may_hold"]


def found_schema() -> pa.Schema:
    """A lookup's rows: what the fold needs of a stored row (``fold.stored_arrow_schema()``),
    and the row's ``key_hash``, which tells whether a write may match by it alone
    (``layout.hash_identifies_keys``)."""
    return stored_arrow_schema().append(pa.field("key_hash", pa.int64()))

#: Up to this many keys the Spark lookup is a filter on their hashes; beyond it, a
#: broadcast semi-join. Measured on a 200k-key store: 2-50 keys 0.30-0.53 s against
#: 0.48-0.69 s for the join (no exchange to plan and run); at 1,000 keys the two are even.
LOOKUP_IN_LIST = 256


#: A delta-rs scan of a table with this many files with deletion vectors hangs for good
#: (delta-rs 1.6.6, delta-kernel: the deletion-vector readers fill tokio's blocking pool,
#: 512 threads, which their results are delivered through; seen here on 1,000 such files,
#: not on 1,000 without). A lookup that would scan that many reads with Spark instead, for
#: as long as the table has them; OPTIMIZE rewrites files without their deletion vectors.
DELTA_RS_MAX_DV_FILES = 256

#: ``auto`` gives up on delta-rs (until the store is opened again) after this many failed
#: lookups in a row; a single failure (a passing I/O error) uses Spark for that batch only.
GIVE_UP_AFTER = 3

HOW = ("auto", "delta-rs", "spark")


class Lookup:
    """The stored rows of a batch's keys, by ``store.lookup`` (``auto``: delta-rs for a local
    table, Spark otherwise).

    Under ``auto`` a failed delta-rs read is done by Spark instead (the batch goes on), and
    after ``GIVE_UP_AFTER`` failures in a row Spark reads for good, with a warning. With
    ``delta-rs`` chosen explicitly a failure is the batch's error.
    """

    def __init__(self, how: str = "auto", options: dict[str, str] | None = None) -> None:
        if how not in HOW:
            raise ValueError(f"store.lookup = {how!r}: expected one of {', '.join(HOW)}")
        self.how = how
        #: delta-rs's storage options for the table (``ttl.delta_rs``: S3's, from the
        #: store's Spark session; ``None`` for a local table).
        self.options = options
        self.fell_back = False
        self.failures = 0  # delta-rs failures in a row
        self.reads: Counter[str] = Counter()  # lookups per reader (tests, the bench)
        #: The file statistics the last delta-rs lookup read: (path, version, delta-rs's
        #: flattened add actions), for the write's own file skipping.
        self.statistics: tuple[str, int, pa.Table] | None = None
        self.warned_deadlock = False

    def uses_delta_rs(self, path: str) -> bool:
        """Whether the next lookup of ``path`` tries delta-rs: under ``auto``, for a table
        on the local file system or on S3."""
        if self.fell_back or self.how == "spark":
            return False
        return (self.how == "delta-rs" or local_path(path) is not None
                or urlparse(path).scheme in S3_SCHEMES)

    def _warn_deletion_vectors(self, path: str, files: int) -> None:
        if not self.warned_deadlock:
            log.warning("%s: %d files carry deletion vectors; lookups that would read most "
                        "of the table read with Spark until OPTIMIZE folds them in (delta-rs "
                        "can hang on %d in one scan)", path, files, DELTA_RS_MAX_DV_FILES)
            self.warned_deadlock = True

    def __call__(self, spark, path: str, keys: pa.Array, version: int) -> pa.Table:
        """The stored rows at ``version`` whose ``key_hash`` is one of ``keys``' (an Arrow
        binary array): theirs, and any other key's with the same hash; as Arrow in
        ``found_schema()``."""
        if not len(keys):
            return found_schema().empty_table()
        self.statistics = None
        with_vectors = deletion_vector_files(path, version, spark)
        # Unknown (a remote table's checksum not read): as if many, so delta-rs reads only
        # when its file skipping leaves few files (``must_prune``).
        many = with_vectors is None or with_vectors >= DELTA_RS_MAX_DV_FILES
        if many and with_vectors is not None:
            self._warn_deletion_vectors(path, with_vectors)
        if self.uses_delta_rs(path) and not (many and len(keys) > PRUNE_KEYS):
            seen: list[pa.Table] = []
            try:
                found = with_delta_rs(local_path(path) or path, keys, version, statistics=seen,
                                      must_prune=many, options=self.options)
            except Exception as exc:
                if self.how == "delta-rs":
                    raise
                self.failures += 1
                self.fell_back = self.failures >= GIVE_UP_AFTER
                log.warning("the lookup read %s with Spark %s: delta-rs failed (%s: %s)", path,
                            "from now on" if self.fell_back else "for this batch",
                            type(exc).__name__, exc)
            else:
                self.failures = 0
                if seen:
                    self.statistics = (path, version, seen[0])
                if found is not None:  # None: it would have read too much (``must_prune``)
                    self.reads["delta-rs"] += 1
                    return found
        self.reads["spark"] += 1
        return with_spark(spark, path, keys, version)

    def files_at(self, path: str, version: int) -> pa.Table | None:
        """The file statistics (delta-rs's flattened add actions) the lookup of ``path`` at
        ``version`` read, when it read them and they hold ``key_hash`` bounds; else
        ``None``."""
        if self.statistics is None or self.statistics[:2] != (path, version):
            return None
        files = self.statistics[2]
        return files if "min.key_hash" in files.column_names else None

    def share_to_read(self, path: str, version: int, keys: pa.Array) -> float | None:
        """``read_share`` of ``keys`` (up to ``PRUNE_KEYS``) in the table at ``version``,
        from the file statistics the lookup of that version read; ``None`` when unknown (a
        Spark lookup, a large batch, no files)."""
        if (self.statistics is None or self.statistics[:2] != (path, version)
                or len(keys) > PRUNE_KEYS):
            return None
        files = self.statistics[2]
        if not files.num_rows or "min.key_hash" not in files.column_names:
            return None
        return read_share(files, keys)


#: DataFusion's settings for the delta-rs lookup's scan: batches of 64k rows instead of 8k,
#: so the matching (``_matching``) handles an eighth as many batches. 100k keys in a
#: 10M-key table: 0.40-0.43 s with 8k, 0.30-0.31 s with 64k (32k: 0.33 s).
SCAN_SETTINGS = {"datafusion.execution.batch_size": str(1 << 16)}

#: The delta-rs lookup matches scanned rows against the batch's keys this many rows at a
#: time (``_matching``: one concatenation and one pass of ``HashSet.rows`` per call, so the
#: calls are few). The driver holds at most this many rows of the narrow columns, and one
#: scanned batch more (about 40 MB).
MATCH_ROWS = 1 << 20


#: Up to this many keys, a delta-rs lookup may name their ``key_hash`` values as literals,
#: so the reader skips every file whose ``key_hash`` statistics hold none of them:
#: DataFusion turns a literal ``IN`` list of at most 20 values into a per-value test of the
#: statistics (``MAX_LIST_VALUE_SIZE_REWRITE``); a longer list prunes nothing and costs a
#: test per row, and the same values as an ``OR`` took 0.58 s to plan at 256 keys.
PRUNE_KEYS = 20

#: delta-rs names the keys only when the files' statistics say it reads at most this share
#: of the table's bytes (``read_share``): on a table whose every file spans the whole
#: ``key_hash`` range (appends, a layout by expiry) the filter skips nothing and costs
#: time (measured on 1M keys in 100 files: 0.30 s against 0.11-0.23 s without it; on the
#: same keys sorted by ``key_hash``, 0.07-0.16 s against 0.29-0.54 s).
PRUNE_SHARE = 0.5


def key_hash_predicate(keys: pa.Array, column: str = "key_hash") -> str | None:
    """``column IN (...)`` of the keys' hashes for a batch of up to ``PRUNE_KEYS`` keys,
    else ``None``."""
    if len(keys) > PRUNE_KEYS:
        return None
    hashes = sorted(set(key_hashes(keys).to_pylist()))
    return f"{column} IN ({', '.join(str(h) for h in hashes)})"


def in_ranges(hashes: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """For each range [low, high], whether one of the sorted ``hashes`` falls in it (a
    search per range, not a comparison per hash: a batch may hold 10,000 keys)."""
    return (np.searchsorted(hashes, high, side="right")
            > np.searchsorted(hashes, low, side="left"))


def may_hold(files: pa.Table, hashes: np.ndarray) -> np.ndarray:
    """For each of ``files`` (delta-rs's flattened add actions), whether its ``key_hash``
    statistics say it may hold one of the sorted ``hashes``; a file without them may hold
    any."""
    low, high = files["min.key_hash"], files["max.key_hash"]
    known = pc.and_(pc.is_valid(low), pc.is_valid(high)).to_numpy(zero_copy_only=False)
    low = pc.fill_null(low, 0).to_numpy().astype(np.int64)   # exact: never through floats
    high = pc.fill_null(high, 0).to_numpy().astype(np.int64)
    return in_ranges(hashes, low, high) | ~known


def _may_hold(files: pa.Table, keys: pa.Array) -> np.ndarray:
    """``may_hold`` of ``keys``' hashes."""
    return may_hold(files, np.sort(key_hashes(keys).to_numpy()))


def files_to_read(files: pa.Table, keys: pa.Array) -> int:
    """How many of ``files`` may hold one of ``keys`` by their ``key_hash`` statistics."""
    return int(_may_hold(files, keys).sum())


def read_share(files: pa.Table, keys: pa.Array) -> float:
    """The share of the table's bytes (by ``size_bytes``; by files without it) in the files
    that may hold one of ``keys``: what a read that names them still reads. By bytes, not
    files: a stream's small files written since the last OPTIMIZE each span the whole
    range, and must not hide that the large clustered files are skipped."""
    if not files.num_rows:
        return 1.0
    held = _may_hold(files, keys)
    if "size_bytes" not in files.column_names:
        return float(held.mean())
    sizes = pc.fill_null(files["size_bytes"], 0).to_numpy().astype(np.float64)
    total = sizes.sum()
    return float(sizes[held].sum() / total) if total > 0 else float(held.mean())


def _pruning(files: pa.Table, keys: pa.Array) -> str | None:
    """The predicate a delta-rs lookup of ``keys`` filters by: ``key_hash_predicate``
    when the statistics say it skips files (``PRUNE_SHARE``), else ``None``."""
    if not files.num_rows or "min.key_hash" not in files.column_names:
        return None
    if read_share(files, keys) > PRUNE_SHARE:
        return None
    return key_hash_predicate(keys)


def checksum(path: str, version: int, spark=None,
             options: Mapping[str, str] | None = None) -> dict | None:
    """The checksum file Delta writes with each version of a table (sizes, counts of files
    with deletion vectors and of deleted rows), ``{}`` without one: read from the local
    file system, or elsewhere through ``spark``'s Hadoop file system (one small GET on
    S3), or without Spark from S3 with delta-rs's storage ``options``
    (``delta_rs.read_object``: ``None``, with a warning, when S3 refused or failed the
    read, so callers can tell that from a version without a checksum); else ``{}``."""
    name = f"_delta_log/{version:020d}.crc"
    local = local_path(path)
    if local is None and spark is None and options is not None \
            and urlparse(path).scheme in S3_SCHEMES:
        try:
            return json.loads(delta_rs.read_object(f"{path.rstrip('/')}/{name}", options))
        except FileNotFoundError:
            return {}
        except Exception as exc:  # noqa: BLE001 - unknown: the callers' safe side
            log.warning("could not read the checksum of %s version %s: %s: %s", path,
                        version, type(exc).__name__, exc)
            return None
    try:
        if local is not None:
            with open(f"{local.rstrip('/')}/{name}") as file:
                return json.load(file)
        if spark is not None:
            return json.loads(delta_log.read_text(spark, f"{path.rstrip('/')}/{name}"))
        return {}
    except Exception:  # noqa: BLE001 - no checksum (not written, gone, unreadable): unknown
        return {}


def deletion_vector_files(path: str, version: int, spark=None) -> int | None:
    """How many files of ``version`` carry deletion vectors: 0 when a local table's
    checksum does not say (Delta writes one with every commit unless told not to),
    ``None`` when a remote table's could not be read."""
    found = checksum(path, version, spark)
    if not found and local_path(path) is None:
        return None
    return int((found or {}).get("numDeletionVectorsOpt") or 0)


def with_delta_rs(path: str, keys: pa.Array, version: int,
                  statistics: list | None = None, must_prune: bool = False,
                  options: dict[str, str] | None = None) -> pa.Table | None:
    """The delta-rs lookup: the table at ``version``, its narrow columns streamed in Arrow
    batches and matched to ``keys``' hashes (``HashSet`` of ``key_hash`` on the driver: the
    rows of every key sharing a hash with one of ``keys``) ``MATCH_ROWS`` at a time; a
    small batch reads only the files that can hold its keys, when that skips files
    (``PRUNE_KEYS``, ``PRUNE_SHARE``). The file statistics (delta-rs's add actions) are
    appended to ``statistics`` when it is given (the write skips files by them too).
    ``must_prune``: read only if that skips all but fewer than ``DELTA_RS_MAX_DV_FILES``
    files, else ``None``."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(path, version=version, storage_options=options)
    pruning = None
    if len(keys) <= PRUNE_KEYS or statistics is not None:
        files = pa.table(table.get_add_actions(flatten=True))
        if statistics is not None:
            statistics.append(files)
    if len(keys) <= PRUNE_KEYS:
        pruning = _pruning(files, keys)
        if must_prune and (pruning is None
                           or files_to_read(files, keys) >= DELTA_RS_MAX_DV_FILES):
            return None
    elif must_prune:
        return None
    reader = QueryBuilder(SCAN_SETTINGS).register("t", table).execute(
        f"SELECT key_hash, {', '.join(STORED_COLUMNS)} FROM t"
        + (f" WHERE {pruning}" if pruning else ""))
    hashes = HashSet(key_hashes(keys))
    found, pending, rows = [], [], 0
    for raw in reader:
        batch = pa.record_batch(raw)  # an arro3 batch (Arrow's C interface) -> pyarrow
        pending.append(batch)
        rows += batch.num_rows
        if rows >= MATCH_ROWS:
            found.append(_matching(pending, hashes))
            pending, rows = [], 0
    if pending:
        found.append(_matching(pending, hashes))
    return pa.concat_tables(found) if found else found_schema().empty_table()


class HashSet:
    """The batch keys' hashes, asked of every scanned row's ``key_hash``: which rows hold
    one of them. A 10M-key table scanned for 100k keys asks 10M times, and ``pc.is_in``
    took 0.19 s for it (it builds its hash table of the 100k again at every call, about
    5 ms). Here a bitmap indexed by a hash's top bits, built once, rules out all but a few
    per cent of the rows (32 slots or more per hash up to 512k hashes, a byte each: 4 MB
    for 100k hashes, at most 2**24 slots, 16 MB), and the rest are looked up exactly in
    the sorted hashes. Hashes are uniform (xxHash64
    of the key), so the bitmap works for any keys; a skew would only make more rows reach
    the exact test. Matching a 10M-key table's rows to 100k keys: 0.45 s with ``is_in``,
    0.17 s this way (``_matching``, one table, median of 5)."""

    def __init__(self, hashes: pa.Array) -> None:
        self.sorted = np.unique(hashes.to_numpy(zero_copy_only=False).astype(np.int64))
        bits = min(24, max(12, len(self.sorted).bit_length() + 5))
        self._shift = np.uint64(64 - bits)
        self._bitmap = np.zeros(1 << bits, dtype=np.bool_)
        self._bitmap[self._slots(self.sorted)] = True

    def _slots(self, values: np.ndarray) -> np.ndarray:
        return (values.view(np.uint64) >> self._shift).astype(np.intp)

    def rows(self, column: pa.ChunkedArray) -> np.ndarray:
        """The positions (ascending) of ``column``'s values (int64) that are one of the
        hashes; a null is none of them (a row an operator's write left without its
        ``key_hash``), as with ``pc.is_in``."""
        chunks = [pc.fill_null(c, 0) if c.null_count else c for c in column.chunks]
        values = (np.concatenate([c.to_numpy() for c in chunks]) if chunks
                  else np.empty(0, dtype=np.int64))
        maybe = np.flatnonzero(self._bitmap[self._slots(values)])
        if column.null_count:
            valid = np.concatenate([c.is_valid().to_numpy(zero_copy_only=False)
                                    for c in column.chunks])
            maybe = maybe[valid[maybe]]
        if not len(self.sorted):
            return maybe  # empty: the bitmap is all False
        candidates = values[maybe]
        at = np.searchsorted(self.sorted, candidates)
        at[at == len(self.sorted)] = 0  # past the largest: not one of them
        return maybe[self.sorted[at] == candidates]


def _matching(batches: list[pa.RecordBatch], hashes: HashSet) -> pa.Table:
    """The rows of ``batches`` (``key_hash``, then ``STORED_COLUMNS``) whose ``key_hash`` is
    one of ``hashes``, in ``found_schema()`` (DataFusion hands out view types, binary_view;
    the fold wants binary). Matching the 8-byte hash, not the key, is also the cheaper
    test."""
    schema = found_schema()
    hashed = pa.chunked_array([b.column(0) for b in batches], type=pa.int64())
    rows = hashes.rows(hashed)
    taken = pa.array(rows, type=pa.int64())
    starts = np.fromiter(accumulate((b.num_rows for b in batches), initial=0), dtype=np.int64)
    cuts = np.searchsorted(rows, starts)
    columns = []
    for i in range(len(STORED_COLUMNS)):
        wanted = schema.field(i).type
        if pa.types.is_binary_view(batches[0].schema.field(i + 1).type):
            parts = [kept(b.column(i + 1), pa.array(rows[cuts[j]:cuts[j + 1]] - starts[j]))
                     for j, b in enumerate(batches) if cuts[j] < cuts[j + 1]]
            columns.append(pa.chunked_array(parts, type=wanted))
        else:
            columns.append(pa.chunked_array([b.column(i + 1) for b in batches])
                           .take(taken).cast(wanted))
    return pa.Table.from_arrays([*columns, hashed.take(taken)], schema=schema)


def kept(array: pa.Array, rows: pa.Array) -> pa.Array:
    """``array.take(rows)``, for a ``binary_view`` array (DataFusion's binary columns) too,
    which pyarrow (26) cannot filter or take: its 16-byte views are taken as fixed-size
    values, the data buffers they point into kept as they are, and the few rows left are
    cast to ``binary``. Casting every row first, as the lookup did, cost 46 ms per million
    keys in isolation; 100k keys looked up in a 10M-key table took 0.70 s with it and
    0.59-0.65 s without."""
    if not pa.types.is_binary_view(array.type):
        return array.take(rows)
    if array.null_count:
        return array.cast(pa.binary()).take(rows)
    buffers = array.buffers()
    views = pa.Array.from_buffers(pa.binary(16), len(array), [None, buffers[1]],
                                  offset=array.offset).take(rows)
    return pa.Array.from_buffers(pa.binary_view(), len(views),
                                 [None, views.buffers()[1], *buffers[2:]]).cast(pa.binary())


def with_spark(spark, path: str, keys: pa.Array, version: int) -> pa.Table:
    """The Spark lookup, by ``key_hash`` as ``with_delta_rs``. The table's rows are never
    shuffled: a small batch's hashes filter the scan, a large batch's are broadcast to it."""
    from pyspark.sql import functions as F

    if len(keys) <= LOOKUP_IN_LIST:  # through the path: Delta skips files by the hashes
        table = spark.read.format("delta").option("versionAsOf", version).load(path)
        hashes = set(key_hashes(keys).to_pylist())
        prune = F.lit(False)
        for h in sorted(hashes):  # an OR: Spark tests an IN list as one min-max range
            prune = prune | (F.col("key_hash") == F.lit(h))
        return table.where(prune).select(*STORED_COLUMNS, "key_hash").toArrow()
    table = delta_log.table_at(spark, path, version)  # every file: listed once
    wanted = spark.createDataFrame(pa.table({"key_hash": pc.unique(key_hashes(keys))}))
    return (table.select("key_hash", *STORED_COLUMNS)
            .join(F.broadcast(wanted), "key_hash", "left_semi")
            .select(*STORED_COLUMNS, "key_hash").toArrow())
