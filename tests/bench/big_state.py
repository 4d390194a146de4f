"""Benchmark: how a store's costs grow with its size (prints figures; not a test).

    .venv/bin/python -m tests.bench.big_state                         # 1M and 10M keys
    .venv/bin/python -m tests.bench.big_state --sizes 1000000,100000000   # opt-in, long
    .venv/bin/python -m tests.bench.big_state --sizes 1000000 --layout unclustered
    .venv/bin/python -m tests.bench.big_state --layout clustered,both,expiry  # side by side

For each size N, one table at a time (built, measured, removed):

1. **build**: N keys written straight into a v3 store table by Spark, in files of
   ``--rows-per-file`` rows; ``clustered`` (the default) gives each file a narrow
   ``key_hash`` range; ``unclustered`` spreads every file over the whole range, as appends
   do; ``expiry`` orders the files by ``expires_at``, as a Z-order by it does; ``both``
   groups them by expiry and orders each group by ``key_hash``, as OPTIMIZE does for
   ``maintenance.cluster_by = "both"`` (``ttl.store.ordering``). 6,000 of
   the keys are due at the sweeps' times, 1,000 at each, the rest live for a week.
2. **open**: a ``DeltaStore`` opened on it (layout checks, stream-time recovery, the
   dead-letter table), as every command and the stream's start do.
3. **batches** through ``DeltaStore.apply_batch``: ``--batches`` of 20 updates of stored
   keys, as many of 20 new keys (with ``--vs-delta-write``, as many pairs of 20 updates
   written alternately by ttl's replace by position and by Delta's ``replaceWhere``),
   and ``--w2-batches`` of ``--w2`` uniform updates (W2) after one that is not
   reported (a table's first W2 batch is up to twice as slow as the later ones: its
   plan's code compiled, every file's first deletion vector); the median commit time of
   each kind, with its lookup and write phases, and W2's records/s.
4. **sweeps**: six that evict 1,000 entries each, spread over every file (the first's
   lateness measured apart, as the stream does after the batch; with
   ``--vs-delta-write``, made in turn by ttl's delete by position and Delta's
   ``DELETE``, as W2 pairs are by the two writes), then one with nothing due. The
   store's bound on the earliest expiry is primed at open, as the stream's start does.
5. **status** (``ttl status``'s reads, delta-rs), the metrics' table figures (read in the
   background) and a **scrape** of them.
6. **memory**: the driver's peak RSS (Python) and the bytes of the JVM's live objects once
   the store settled (each size's tables are forgotten before the next).

With ``--trigger S`` the 20-record batches run again, each starting S seconds after the one
before, as a stream's processing-time trigger starts them (``*_triggered_commit_s``): the
snapshot of the version a batch writes on is then computed before it comes, as in a stream.
Then every figure's ratio to the first size's, from the same run. With ``--commits``,
start-up against the log's length instead: a store whose log holds that many engine
commits, opened with its stream-time floor 50 commits behind, beside the whole-history read
a start-up used to make; with ``--clean-up`` as well, the scheduled clean-up of that log
(a 2-day retention, the log's commits written 3 days ago but the newest) and the same
figures after it. A 100M-key table takes about 3 GB of disk (in ``--dir``) and
3 minutes to build on an idle 2-core machine, the whole 100M run about 6 minutes; 10M,
0.3 GB and 20 s.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from ttl import eviction, status
from ttl.clock import FixedClock
from ttl.config import StoreConfig, from_dict
from ttl.jvm import log_store
from ttl.phases import BatchPhases
from ttl.spark import get_session
from ttl.store import DeltaStore, ordering
from ttl.store.lookup import PRUNE_KEYS

NOW = 1_700_000_000_000
TTL = 7 * 86_400_000
DUE = 1_000  # entries each sweep evicts
SWEEPS = 6  # sweeps that evict DUE entries each, spread over every file
SWEEP_T = NOW - 1  # the last of them


def build(spark, path: str, keys: int, rows_per_file: int, layout: str) -> float:
    """The table at ``path``: ``keys`` keys, of which ``SWEEPS`` groups of ``DUE`` (by
    their id, so every file holds some) are due one after the other, the last at
    ``SWEEP_T`` (``sweep_times``)."""
    from pyspark.sql import functions as F

    started = time.monotonic()
    ts = F.lit(NOW - 3_600_000) + F.col("id") % 1000
    rows = spark.range(keys).select(
        F.unhex(F.sha2(F.col("id").cast("string"), 256).substr(1, 16)).alias("key"),
        F.concat(F.lit(b"value-"), F.col("id").cast("string").cast("binary")).alias("value"),
        ts.alias("ts"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.when(F.col("id") < DUE * SWEEPS,
               F.lit(SWEEP_T - SWEEPS + 1) + F.col("id") % SWEEPS).otherwise(ts + F.lit(TTL))
         .alias("expires_at"),
        F.lit(NOW).alias("updated_at"),
        F.lit(None).cast("bigint").alias("record_ttl"),
    ).withColumn("key_hash", F.xxhash64("key"))
    rows = rows.select("key", "value", "ts", "headers", "expires_at", "updated_at",
                       "key_hash", "record_ttl")
    files = max(1, -(-keys // rows_per_file))
    if layout == "clustered":
        rows = rows.repartitionByRange(files, "key_hash").sortWithinPartitions("key_hash")
    elif layout == "expiry":
        rows = rows.repartitionByRange(files, "expires_at").sortWithinPartitions("expires_at")
    elif layout == "both":  # what OPTIMIZE writes for maintenance.cluster_by = "both"
        groups = ordering.expiry_groups(files, PRUNE_KEYS)
        rows = ordering.ordered(rows, files, ordering.group_bounds(rows, groups))
    else:
        rows = rows.repartition(files)
    rows.write.format("delta").mode("append").save(path)
    return time.monotonic() - started


def _updates(spark, keys: int, size: int, seed: int, new: bool = False):
    """``size`` records: updates of stored keys drawn uniformly (never the due ones, so
    each sweep evicts ``DUE``), or keys never stored."""
    from pyspark.sql import functions as F

    due = DUE * SWEEPS
    ids = F.lit(due) + F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % (keys - due)
    if new:
        ids = F.lit(keys + seed * size) + F.col("id")
    return spark.range(size).select(
        F.unhex(F.sha2(ids.cast("string"), 256).substr(1, 16)).alias("key"),
        F.concat(F.lit(b"new-"), F.col("id").cast("string").cast("binary")).alias("value"),
        (F.lit(NOW) + F.col("id") % 1000).alias("timestamp"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.lit(0).alias("partition"), (F.lit(seed * size) + F.col("id")).alias("offset"),
    ).toArrow()


def _timed_batches(spark, store, keys: int, size: int, count: int, seed: int,
                   new: bool = False, unreported: int = 0,
                   trigger_s: float = 0.0) -> dict[str, float]:
    """``count`` batches back to back, or (``trigger_s``) each starting that long after the
    one before, as a stream's processing-time trigger starts them."""
    commits, lookups, writes = [], [], []
    previous = None
    for i in range(-unreported, count):
        records = _updates(spark, keys, size, seed + i, new)
        phases = BatchPhases(spark)
        if trigger_s and previous is not None:
            time.sleep(max(0.0, previous + trigger_s - time.monotonic()))  # the trigger
        started = previous = time.monotonic()
        store.apply_batch(records, wall_ms=NOW + seed + i, phases=phases)
        commits.append(time.monotonic() - started)
        split = phases.as_dict()
        phases.close()
        if i < 0:
            commits.pop()
            continue
        lookups.append(split.get("lookup", 0.0))
        writes.append(split.get("write", 0.0))
    return {"commit_s": statistics.median(commits), "lookup_s": statistics.median(lookups),
            "write_s": statistics.median(writes), "records_per_s": size / statistics.median(
                commits)}


def _writes_alternated(spark, store, keys: int, count: int, seed: int) -> dict[str, float]:
    """``count`` pairs of 20-update batches, the first of each written by ttl's replace by
    position and the second by Delta's ``replaceWhere`` (``write.POSITIONAL_ENABLED``),
    alternated in one process: each write's median commit and write phase."""
    from ttl.store import write

    figures: dict[str, list[float]] = {}
    for i in range(count):
        for name, on in (("positional", "true"), ("delta", "false")):
            store.spark.conf.set(write.POSITIONAL_ENABLED, on)  # the store's own session
            try:
                one = _timed_batches(spark, store, keys, 20, 1, seed + 2 * i + (on == "false"))
            finally:
                store.spark.conf.unset(write.POSITIONAL_ENABLED)
            for k in ("commit_s", "write_s"):
                figures.setdefault(f"update20_{name}_{k}", []).append(one[k])
    return {k: statistics.median(v) for k, v in figures.items()}


def sweep_times() -> list[int]:
    """The T of each sweep: the one at which the next ``DUE`` entries are due."""
    return [SWEEP_T - SWEEPS + 1 + g for g in range(SWEEPS)]


def _sweeps(store, alternate: bool) -> dict[str, float]:
    """The ``SWEEPS`` sweeps, each evicting ``DUE`` entries from every file; with
    ``alternate``, made in turn by ttl's delete by position and Delta's ``DELETE``
    (``write.POSITIONAL_ENABLED``), the first by position. The first's time, evictions
    and lateness (measured apart, outside the lock, as the stream does), and the median
    sweep of each way."""
    from ttl.store import write

    out, seconds = {}, {}
    for g, t in enumerate(sweep_times()):
        name = "delta" if alternate and g % 2 else "positional" if alternate else "due"
        if alternate:
            store.spark.conf.set(write.POSITIONAL_ENABLED, str(name == "positional").lower())
        try:
            store.wall_clock.set(t)
            swept = eviction.sweep(store, "wall")
        finally:
            store.spark.conf.unset(write.POSITIONAL_ENABLED)
        seconds.setdefault(name, []).append(swept.seconds)
        if g == 0:
            out["sweep_due_s"], out["sweep_evicted"] = swept.seconds, swept.evicted
            started = time.monotonic()
            eviction.measure_lateness(store, swept)  # outside the lock, after the sweep
            out["sweep_lateness_s"] = time.monotonic() - started
    for name, values in seconds.items():
        out[f"sweep_{name}_median_s"] = statistics.median(values)
    return out


def _w2_alternated(spark, store, keys: int, args, seed: int) -> dict[str, float]:
    """``--w2-batches`` pairs of W2 batches, the first of each written by ttl's replace by
    position and the second by Delta's replace, alternated: each write's records/s."""
    from ttl.store import write

    figures: dict[str, list[float]] = {}
    for i in range(args.w2_batches):
        for name, on in (("positional", "true"), ("delta", "false")):
            store.spark.conf.set(write.POSITIONAL_ENABLED, on)
            try:
                one = _timed_batches(spark, store, keys, args.w2, 1,
                                     seed + 2 * i + (on == "false"))
            finally:
                store.spark.conf.unset(write.POSITIONAL_ENABLED)
            figures.setdefault(f"w2_{name}_commit_s", []).append(one["commit_s"])
            figures.setdefault(f"w2_{name}_write_s", []).append(one["write_s"])
    out = {k: statistics.median(v) for k, v in figures.items()}
    for name in ("positional", "delta"):
        out[f"w2_{name}_records_per_s"] = args.w2 / out[f"w2_{name}_commit_s"]
    return out


def _jvm_heap_mb(spark) -> float:
    """The bytes of the JVM's live objects: ``jmap -histo:live``'s total (a full collection
    first), the second of two in a row, as the first leaves what only its collection made
    unreachable (finalized and cleaned-up objects). The heap used after ``System.gc()`` is
    not that: at 100M keys it read 217 MB where the live objects came to 101 MB, and a
    single histogram 191 MB where the second came to 117 MB (2026-11-30). Without the
    driver's JDK's ``jmap`` (or should it fail), the heap used after ``System.gc()``, an
    upper bound, with a line that says so."""
    jvm = spark.sparkContext._jvm
    pid = jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getPid()
    jmap = Path(str(jvm.java.lang.System.getProperty("java.home"))) / "bin" / "jmap"
    try:
        for _ in range(2):
            histogram = subprocess.run([str(jmap), "-histo:live", str(pid)],
                                       capture_output=True, text=True, check=True,
                                       timeout=300).stdout.strip().splitlines()
        return int(histogram[-1].split()[-1]) / 2**20  # "Total <instances> <bytes>"
    except (OSError, subprocess.SubprocessError, IndexError, ValueError) as exc:
        print(f"  (jmap: {exc}; the heap used after System.gc() instead)", flush=True)
    jvm.java.lang.System.gc()
    runtime = jvm.java.lang.Runtime.getRuntime()
    return (runtime.totalMemory() - runtime.freeMemory()) / 2**20


def measure(spark, keys: int, args, layout: str) -> dict[str, float]:
    work = Path(tempfile.mkdtemp(prefix="ttl-big-", dir=args.dir))
    try:
        path = str(work / "store")
        conf = StoreConfig(name="big", path=path, ttl=TTL)
        DeltaStore(spark, conf, wall_clock=FixedClock(NOW))  # creates the empty table
        out = {"build_s": build(spark, path, keys, args.rows_per_file, layout)}
        started = time.monotonic()
        store = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
        out["open_s"] = time.monotonic() - started
        started = time.monotonic()
        eviction.prime_expiry_floor(store)  # as the stream does before its query
        out["prime_floor_s"] = time.monotonic() - started
        for name, new in (("update20", False), ("new20", True)):
            figures = _timed_batches(spark, store, keys, 20, args.batches, 1_000, new)
            out.update({f"{name}_{k}": v for k, v in figures.items() if k != "records_per_s"})
        if args.vs_delta_write:
            out.update(_writes_alternated(spark, store, keys, args.batches, 2_000))
        if args.trigger:
            for name, new in (("update20", False), ("new20", True)):
                figures = _timed_batches(spark, store, keys, 20, args.batches, 3_000, new,
                                         trigger_s=args.trigger)
                out[f"{name}_triggered_commit_s"] = figures["commit_s"]
        w2 = _timed_batches(spark, store, keys, args.w2, args.w2_batches, 5_000, unreported=1)
        out["w2_records_per_s"] = w2["records_per_s"]
        out["w2_commit_s"] = w2["commit_s"]
        out["w2_lookup_s"], out["w2_write_s"] = w2["lookup_s"], w2["write_s"]
        if args.vs_delta_write:
            out.update(_w2_alternated(spark, store, keys, args, 6_000))
        out.update(_sweeps(store, args.vs_delta_write))
        out["sweep_none_s"] = eviction.sweep(store, "wall").seconds
        out.update(_status_and_scrape(path, work))
        out["files"] = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]
        out["python_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        store.quiesce()  # a checkpoint under way would fail as the directory goes
        out["jvm_heap_mb"] = _jvm_heap_mb(spark)  # what the settled store holds
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)
        _forget_tables(spark)


def _forget_tables(spark) -> None:
    """Drop what the JVM keeps of a size's table once it is gone (Delta's cache of its
    logs and snapshots, Spark's cached blocks), so the next size's heap is its own."""
    spark.catalog.clearCache()
    spark.sparkContext._jvm.org.apache.spark.sql.delta.DeltaLog.clearCache()


def _hadoop_checksum(data: bytes) -> bytes:
    """The ``.NAME.crc`` file Hadoop's local file system writes beside each file it writes:
    a header, then a CRC-32 per 512 bytes."""
    import struct
    import zlib

    sums = b"".join(struct.pack(">I", zlib.crc32(data[i:i + 512]))
                    for i in range(0, len(data), 512))
    return b"crc\x00" + struct.pack(">i", 512) + sums


def _engine_commits(path: str, first: int, count: int, stream_time: int) -> None:
    """``count`` commits from version ``first`` on, written straight into the log: engine
    batch metadata and no action, so a long log costs seconds to make (a delta-rs append
    each took 60 ms here); Delta and delta-rs read such a commit as an empty one. Each
    gets Hadoop's checksum file as a commit by Spark does (two files a commit; Spark's
    commits also leave Delta's version checksum and its own checksum: four)."""
    import json

    log_dir = Path(path) / "_delta_log"
    # Commit times of now: older ones (the store's own NOW is in 2023) are past the log's
    # retention, and the clean-up after the engine's next checkpoint would remove them.
    written_ms = int(time.time() * 1000)
    for version in range(first, first + count):
        meta = json.dumps({"ttl": 1, "op": "batch", "store": "big", "whole_position": True,
                           "stream_time": stream_time + version,
                           "input_offsets": {"0": version}}, separators=(",", ":"))
        info = {"commitInfo": {"timestamp": written_ms, "operation": "WRITE",
                               "operationParameters": {"mode": "Append"},
                               "userMetadata": meta, "isBlindAppend": True}}
        data = (json.dumps(info) + "\n").encode()
        (log_dir / f"{version:020d}.json").write_bytes(data)
        (log_dir / f".{version:020d}.json.crc").write_bytes(_hadoop_checksum(data))


def log_growth(spark, commits: int, args) -> dict[str, float]:
    """A store whose log holds ``commits`` engine commits (then a checkpoint, as Delta
    keeps them), opened as the engine does: its floor raised by the stream, 50 commits
    after it; against the whole-history read a start-up used to make."""
    from deltalake import DeltaTable

    from ttl import delta_log

    work = Path(tempfile.mkdtemp(prefix="ttl-log-", dir=args.dir))
    try:
        path = str(work / "store")
        conf = StoreConfig(name="big", path=path, ttl=TTL)
        DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
        first = delta_log.latest_version(spark, path) + 1
        started = time.monotonic()
        _engine_commits(path, first, commits, NOW)
        DeltaTable(path).create_checkpoint()
        out = {"build_s": time.monotonic() - started}
        store = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
        store.raise_stream_time_floor(delta_log.latest_version(spark, path))
        latest = delta_log.latest_version(spark, path)
        _engine_commits(path, latest + 1, 50, NOW)
        started = time.monotonic()
        whole = delta_log.max_stream_time(spark, path)
        out["whole_log_read_s"] = time.monotonic() - started
        started = time.monotonic()
        opened = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
        out["open_s"] = time.monotonic() - started
        started = time.monotonic()
        position = delta_log.last_engine_commit(spark, path, having="input_offsets")
        out["position_s"] = time.monotonic() - started
        out["snapshot_update_s"] = _snapshot_update_s(spark, path)
        out["delta_rs_open_s"] = _delta_rs_open_s(path)
        out.update(_status_and_scrape(path, work))
        batch = _timed_batches(spark, opened, 1_000, 20, args.batches, 1_000, new=True)
        out["new20_commit_s"] = batch["commit_s"]
        opened.quiesce()  # a checkpoint under way would fail as the directory goes
        assert opened.stream_time.value == whole, (opened.stream_time.value, whole)
        assert position is not None
        if args.clean_up:
            out.update(_cleaned(spark, opened, conf, args))
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _status_and_scrape(path: str, work: Path) -> dict[str, float]:
    """``ttl status``'s reads (delta-rs), the metrics' table figures (read in the background)
    and a scrape of them, on the store at ``path``."""
    from ttl.metrics import TableFigures

    profile = from_dict({"store": {"name": "big", "path": path, "ttl": "7d"},
                         "kafka": {"input_topic": "x", "changelog_topic": "y"},
                         "stream": {"checkpoint": str(work / "cp")}})
    out = {}
    started = time.monotonic()
    status.status(profile, None, wall_ms=NOW)
    out["status_s"] = time.monotonic() - started
    figures = TableFigures(profile, every_s=3_600)
    started = time.monotonic()
    figures.refresh()  # what the figures' thread reads every 30 s
    out["figures_read_s"] = time.monotonic() - started
    started = time.monotonic()
    list(figures.collect())  # a scrape
    out["scrape_s"] = time.monotonic() - started
    figures.stop()
    return out


def _snapshot_update_s(spark, path: str) -> float:
    """The median of 5 snapshot updates (``delta_log.latest_version``: a listing of the log)."""
    from ttl import delta_log

    times = []
    for _ in range(5):
        started = time.monotonic()
        delta_log.latest_version(spark, path)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def _delta_rs_open_s(path: str) -> float:
    """The median of 5 delta-rs opens of the table (the lookup's, `status`'s)."""
    from deltalake import DeltaTable

    times = []
    for _ in range(5):
        started = time.monotonic()
        DeltaTable(path)
        times.append(time.monotonic() - started)
    return statistics.median(times)


def _cleaned(spark, store, conf: StoreConfig, args) -> dict[str, float]:
    """The scheduled clean-up of the log (``eviction.clean_log``, everything published)
    once every commit but the last hour's is past a 2-day retention; then the same
    start-up and batch figures on what it leaves."""
    import os

    from ttl import delta_log, eviction

    path = conf.path
    log_dir = Path(path) / "_delta_log"
    then = time.time() - 3 * 86_400
    for name in os.listdir(log_dir):  # a version a ms: a log written in order
        at = then + (int(name[:20]) / 1000 if name[:20].isdigit() else 0)
        os.utime(log_dir / name, (at, at))
    _engine_commits(path, delta_log.latest_version(spark, path) + 1, 10, NOW)  # the last hour
    delta_log.checkpoint_if_due(spark, path)
    store.quiesce()
    latest = delta_log.latest_version(spark, path)
    files = len(os.listdir(log_dir))
    started = time.monotonic()
    eviction.clean_log(store, 2 * 86_400_000, latest)
    out = {"clean_up_s": time.monotonic() - started,
           "log_files_before": float(files), "log_files_after": float(len(os.listdir(log_dir)))}
    started = time.monotonic()
    opened = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
    out["open_after_s"] = time.monotonic() - started
    out["snapshot_update_after_s"] = _snapshot_update_s(spark, path)
    out["delta_rs_open_after_s"] = _delta_rs_open_s(path)
    position = delta_log.recorded_position(spark, path).position
    batch = _timed_batches(spark, opened, 1_000, 20, args.batches, 2_000, new=True)
    out["new20_commit_after_s"] = batch["commit_s"]
    opened.quiesce()
    assert position, "the input position was lost with the commits"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000000,10000000",
                        help="Comma-separated key counts; ratios are to the first.")
    parser.add_argument("--rows-per-file", type=int, default=100_000)
    parser.add_argument("--layout", default="clustered",
                        help="clustered, unclustered, expiry or both; a comma-separated "
                             "list measures each, side by side.")
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--trigger", type=float, default=0.0,
                        help="Also run the 20-record batches this many seconds apart, as "
                             "the stream's trigger starts them (its default: 2).")
    parser.add_argument("--vs-delta-write", action="store_true",
                        help="Also run 20-update and W2 batches alternately with ttl's "
                             "replace by position and Delta's write, and the sweeps with "
                             "ttl's delete by position and Delta's DELETE, in one process.")
    parser.add_argument("--w2", type=int, default=100_000)
    parser.add_argument("--w2-batches", type=int, default=4)
    parser.add_argument("--dir", default=None, help="Where the tables go (default: /tmp).")
    parser.add_argument("--commits", default="",
                        help="Comma-separated log lengths: measure start-up against them "
                             "instead of table sizes (e.g. 1000,10000,100000).")
    parser.add_argument("--clean-up", action="store_true",
                        help="With --commits: then run the scheduled clean-up of the log "
                             "(2-day retention, every commit but the newest past it) and "
                             "measure again.")
    parser.add_argument("--no-watch", action="store_true",
                        help="ttl's log store reads the log's names at every listing, "
                             "without its watch of the directory: the before of the latter.")
    parser.add_argument("--hadoop-listing", action="store_true",
                        help="List local Delta logs with Delta's HDFSLogStore (Hadoop's "
                             "listing), not ttl's FileLogStore: the before of the latter.")
    args = parser.parse_args()
    overrides = {}
    if args.hadoop_listing:
        overrides[log_store.SETTING] = "io.delta.storage.HDFSLogStore"
    if args.no_watch:
        overrides[f"spark.hadoop.{log_store.WATCH_SETTING}"] = "false"
    spark = get_session(overrides=overrides or None)
    print(f"Delta log store for file: paths: "
          f"{spark.conf.get(log_store.SETTING, 'io.delta.storage.HDFSLogStore')}", flush=True)
    results = {}
    if args.commits:
        sizes = [int(s) for s in args.commits.split(",")]
        for commits in sizes:
            print(f"a log of {commits:,} engine commits", flush=True)
            results[commits] = log_growth(spark, commits, args)
            for k, v in results[commits].items():
                print(f"  {k:24} {v:12,.3f}", flush=True)
        _ratios(results, sizes)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    layouts = args.layout.split(",")
    unknown = set(layouts) - {"clustered", "unclustered", "expiry", "both"}
    if unknown:
        parser.error(f"--layout: unknown {', '.join(sorted(unknown))}")
    print("warm-up (100,000 keys, not reported)", flush=True)
    measure(spark, 100_000, args, layouts[0])  # else the first figures carry the JVM's
    for keys in sizes:  # each size once per layout, so layouts compare in one sitting
        for layout in layouts:
            print(f"N={keys:,} keys ({layout}, {args.rows_per_file:,} rows a file)",
                  flush=True)
            results[layout, keys] = measure(spark, keys, args, layout)
            for k, v in results[layout, keys].items():
                print(f"  {k:24} {v:12,.3f}" if isinstance(v, float) else f"  {k:24} {v:12,}",
                      flush=True)
    for layout in layouts:
        if len(sizes) > 1:
            print(f"\n{layout}:", end="")
            _ratios({k: results[layout, k] for k in sizes}, sizes)
    if len(layouts) > 1:
        _side_by_side(results, layouts, sizes)


def _side_by_side(results: dict, layouts: list[str], sizes: list[int]) -> None:
    """Each figure of every layout, per size: one table to compare layouts by."""
    for keys in sizes:
        print(f"\nN={keys:,}: " + " / ".join(layouts))
        for name in results[layouts[0], keys]:
            row = " / ".join(f"{results[lay, keys].get(name, float('nan')):,.3f}"
                             for lay in layouts)
            print(f"  {name:24} {row}")


def _ratios(results: dict, sizes: list[int]) -> None:
    base = results[sizes[0]]
    print(f"\nratio to N={sizes[0]:,}")
    print(f"  {'figure':24}" + "".join(f"{k:>14,}" for k in sizes[1:]))
    for name in base:
        row = "".join(f"{results[k][name] / base[name]:14.2f}" if base[name] else f"{'-':>14}"
                      for k in sizes[1:])
        print(f"  {name:24}{row}")


if __name__ == "__main__":
    main()
