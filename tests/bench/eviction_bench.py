"""Benchmark: wall-clock sweeps (``eviction.sweep``) on large stores (prints figures; not a test).

    .venv/bin/python -m tests.bench.eviction_bench                      # N = 1,000,000
    .venv/bin/python -m tests.bench.eviction_bench --big 10000000       # opt-in, long
    .venv/bin/python -m tests.bench.eviction_bench --parts 3 --duration 60

1. Sweep cost for N = ``--keys`` entries with 0.1 %, 1 % and 10 % expired. Each table is
   built by two ``bulk_load`` commits: N*(1-share) live rows (``expires_at`` far after T,
   prefix ``live-``) and N*share expired rows (``expires_at`` before T, prefix ``exp-``), so
   the expired rows sit in files of their own. Prints the evicted count, the sweep's time
   (``SweepResult.seconds``, which includes reading back the commit for metrics and
   lateness), the table's files before/after (DESCRIBE DETAIL ``numFiles``) and the
   ``operationMetrics`` of the sweep's DELETE commit (files removed, deletion vectors added,
   scan/rewrite time ...).
2. A fixed 10,000 expired entries at N = 100,000 and N = ``--keys``: is the cost flat in the
   table size? Two layouts: ``separate`` (the expired rows in their own commit, as in 1) and
   ``mixed`` (one commit, every (N/10k)-th row expired, so every file holds some), each swept
   as loaded and after ``eviction.optimize`` (OPTIMIZE ZORDER BY expires_at), with Delta's
   default target file size and with a small one (``--optimize-file-mb``) so that a table of
   this size is split into several files with narrow ``expires_at`` ranges.
3. Eviction lateness under a steady load: a ``WallClock`` store with ``--ttl`` (5 s), a
   ``BackgroundScheduler`` from ``schedule.build`` running wall sweeps every ``--interval``
   (10 s) through ``StoreJobs(store.for_thread(), conf, lock=lock)`` while the main thread
   applies ``--batch`` (500) new keys with timestamp = now every ``--every`` (2 s) seconds
   for ``--duration`` (90 s), holding the same lock. Prints every sweep's lateness
   (``SweepResult.lateness_ms``: T - expires_at of its evicted rows, T = the sweep's clock
   value) and row-level p50/p99/max over all sweeps, both against T and against the sweep's
   commit timestamp (``_commit_timestamp`` - expires_at: when the rows actually left the
   table).

Parts 1-2 use a ``FixedClock`` (T = NOW); every table lives in its own temp dir, removed
afterwards.
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

from tests.support import bulk_load
from ttl import eviction, schedule
from ttl.clock import FixedClock, WallClock
from ttl.config import StoreConfig, from_dict
from ttl.record import InputRecord
from ttl.spark import get_session
from ttl.store import DeltaStore

NOW = 1_700_000_000_000
TTL = 7 * 86_400_000
LIVE_TS = NOW                     # expires_at = NOW + 7 d: far after T
EXPIRED_TS = NOW - TTL - 60_000   # expires_at = NOW - 60 s: at or before T
SHARES = (0.001, 0.01, 0.1)
FIXED_EXPIRED = 10_000
SMALL_N = 100_000

# Metrics worth a column of their own; the full operationMetrics dict is printed as well.
FILE_METRICS = ("numRemovedFiles", "numAddedFiles", "numDeletionVectorsAdded",
                "numDeletionVectorsUpdated", "numDeletionVectorsRemoved")


# -- helpers ----------------------------------------------------------------------------------

class Tables:
    """Temp dirs for tables, each removed as soon as its figures are taken."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="ttl-evict-bench-"))
        self._n = 0

    def new(self) -> Path:
        self._n += 1
        path = self.root / f"t{self._n}"
        path.mkdir()
        return path

    @staticmethod
    def drop(path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def num_files(spark, path: str) -> int:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["numFiles"]


def size_mb(spark, path: str) -> float:
    return spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()["sizeInBytes"] / 2**20


def loadavg() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def commit_metrics(spark, path: str, version: int | None) -> dict[str, str]:
    if version is None:
        return {}
    from delta.tables import DeltaTable

    row = (DeltaTable.forPath(spark, path).history(10)
           .where(f"version = {version}").select("operationMetrics").first())
    return dict(row.operationMetrics or {}) if row else {}


def load_mixed(spark, path: str, keys: int, expired: int) -> None:
    """One commit of ``keys`` rows in which every (keys/expired)-th row is expired at NOW, so
    the expired rows are spread over every file. Unlike ``bulk_load``, timestamps vary (live:
    ``expires_at`` spread over a day after NOW + 7 d; expired: over the hour before NOW - 60 s)
    the way a stream's writes do, so that clustering by ``expires_at`` has ranges to split."""
    from pyspark.sql import functions as F

    stride = max(1, keys // max(1, expired))
    is_expired = (F.col("id") % stride == 0) & (F.col("id") < stride * expired)
    jitter = F.abs(F.xxhash64(F.col("id"), F.lit(7)))
    ts = F.when(is_expired, F.lit(EXPIRED_TS) - jitter % 3_600_000) \
          .otherwise(F.lit(LIVE_TS) + jitter % 86_400_000).cast("bigint")
    key = F.concat(F.lit("k"), F.col("id").cast("string")).cast("binary")
    rows = spark.range(keys).select(
        key.alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        ts.alias("ts"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
        (ts + F.lit(TTL)).alias("expires_at"),
        ts.alias("updated_at"),
        F.xxhash64(key).alias("key_hash"),
        F.lit(None).cast("bigint").alias("record_ttl"),
    )
    rows.write.format("delta").mode("append").save(path)


def build_store(spark, tables: Tables, keys: int, expired: int, layout: str) -> DeltaStore:
    path = tables.new() / "store"
    store = DeltaStore(spark, StoreConfig(name="bench", path=str(path), ttl=TTL),
                       wall_clock=FixedClock(NOW))
    if layout == "separate":
        bulk_load(spark, store.path, keys - expired, LIVE_TS, TTL, prefix="live-")
        bulk_load(spark, store.path, expired, EXPIRED_TS, TTL, prefix="exp-")
    else:
        load_mixed(spark, store.path, keys, expired)
    return store


def measure_sweep(spark, store: DeltaStore, expected: int) -> dict:
    files_before = num_files(spark, store.path)
    result = eviction.sweep(store, "wall", NOW)
    files_after = num_files(spark, store.path)
    metrics = commit_metrics(spark, store.path, result.version)
    if result.evicted != expected:
        print(f"  !! evicted {result.evicted}, expected {expected}", flush=True)
    again = eviction.sweep(store, "wall", NOW)  # idempotence: nothing left at T
    return {"evicted": result.evicted, "seconds": result.seconds, "files_before": files_before,
            "files_after": files_after, "metrics": metrics, "lateness": result.lateness_ms,
            "second_sweep": (again.evicted, again.version, round(again.seconds, 2))}


def touched(metrics: dict) -> str:
    return ", ".join(f"{k}={metrics[k]}" for k in FILE_METRICS if k in metrics)


def ms(metrics: dict, key: str) -> str:
    return f"{int(metrics[key]) / 1000:.2f}" if key in metrics else "?"


# -- part 1: sweep cost vs expired share ------------------------------------------------------

def part1(spark, tables: Tables, keys: int) -> None:
    print(f"\n== 1. sweep cost, N={keys:,}, expired share 0.1 % / 1 % / 10 % "
          f"(layout: two bulk loads); loadavg {loadavg()}", flush=True)
    for share in SHARES:
        expired = max(1, round(keys * share))
        started = time.monotonic()
        store = build_store(spark, tables, keys, expired, "separate")
        load_s = time.monotonic() - started
        m = measure_sweep(spark, store, expired)
        print(f"  share {share * 100:g} % ({expired:,} expired): evicted={m['evicted']:,} "
              f"sweep={m['seconds']:.2f} s (DELETE exec {ms(m['metrics'], 'executionTimeMs')} s,"
              f" scan {ms(m['metrics'], 'scanTimeMs')} s), files {m['files_before']} -> "
              f"{m['files_after']}, touched: {touched(m['metrics'])}; load {load_s:.1f} s; "
              f"lateness {m['lateness']}; second sweep (evicted, version, s) "
              f"{m['second_sweep']}", flush=True)
        print(f"    operationMetrics: {m['metrics']}", flush=True)
        Tables.drop(Path(store.path).parent)


# -- part 2: fixed expired count vs table size, and clustering ---------------------------------

VARIANTS = (("separate", None), ("separate", "default"), ("mixed", None),
            ("mixed", "default"), ("mixed", "small"))


def part2(spark, tables: Tables, sizes: list[int], small_file_mb: int) -> None:
    print(f"\n== 2. fixed {FIXED_EXPIRED:,} expired, N = {' vs '.join(f'{n:,}' for n in sizes)}"
          f"; optimize = OPTIMIZE ZORDER BY expires_at before the sweep (default target "
          f"file size, or maxFileSize={small_file_mb} MB); loadavg {loadavg()}", flush=True)
    rows = {}
    for layout, opt in VARIANTS:
        for n in sizes:
            store = build_store(spark, tables, n, FIXED_EXPIRED, layout)
            opt_s = 0.0
            loaded_files = num_files(spark, store.path)
            loaded_mb = size_mb(spark, store.path)
            if opt is not None:
                if opt == "small":
                    store.spark.conf.set("spark.databricks.delta.optimize.maxFileSize",
                                         str(small_file_mb * 1024 * 1024))
                started = time.monotonic()
                eviction.optimize(store)
                opt_s = time.monotonic() - started
                store.spark.conf.unset("spark.databricks.delta.optimize.maxFileSize")
            m = measure_sweep(spark, store, FIXED_EXPIRED)
            m.update(loaded_files=loaded_files, optimize_s=opt_s)
            rows[(layout, opt, n)] = m
            label = f"{layout}/{opt or 'as loaded'}"
            print(f"  {label:18} N={n:>11,}: sweep {m['seconds']:6.2f} s (DELETE exec "
                  f"{ms(m['metrics'], 'executionTimeMs')} s, scan "
                  f"{ms(m['metrics'], 'scanTimeMs')} s), evicted {m['evicted']:,}, files "
                  f"loaded {loaded_files} ({loaded_mb:.1f} MB) -> swept {m['files_before']} -> "
                  f"{m['files_after']}, "
                  f"touched: {touched(m['metrics'])}"
                  + (f"; OPTIMIZE {opt_s:.1f} s" if opt else ""), flush=True)
            print(f"    operationMetrics: {m['metrics']}", flush=True)
            Tables.drop(Path(store.path).parent)
    print("\n  side by side (sweep seconds | DELETE executionTimeMs s | files touched = "
          "removed + DVs added):", flush=True)
    header = "  " + f"{'layout/optimize':20}" + "".join(f"{f'N={n:,}':>34}" for n in sizes)
    print(header)
    for layout, opt in VARIANTS:
        cells = []
        for n in sizes:
            m = rows[(layout, opt, n)]
            met = m["metrics"]
            files = (int(met.get("numRemovedFiles", 0)) + int(met.get("numDeletionVectorsAdded", 0))
                     + int(met.get("numDeletionVectorsUpdated", 0)))
            cells.append(f"{m['seconds']:6.2f} s | {ms(met, 'executionTimeMs'):>6} s | "
                         f"{files:3}/{m['files_before']:<3}")
        label = f"{layout}/{opt or 'as loaded'}"
        print(f"  {label:20}" + "".join(f"{c:>34}" for c in cells), flush=True)


# -- part 3: lateness under a steady load ------------------------------------------------------

def _quantiles(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, max(0, -(-99 * len(ordered) // 100) - 1))]
    return f"p50={statistics.median(ordered):,.0f} p99={p99:,.0f} max={ordered[-1]:,.0f}"


def part3(spark, tables: Tables, *, ttl: str, interval: str, batch: int, every: float,
          duration: float, verbose: bool = False) -> None:
    from pyspark.sql import functions as F

    print(f"\n== 3. lateness: WallClock store, ttl={ttl}, wall sweeps every {interval}, "
          f"{batch} new keys every {every:g} s for {duration:g} s; loadavg {loadavg()}", flush=True)
    warm = tables.new() / "warm"  # first MERGEs of a session are slow: keep them out
    warm_store = DeltaStore(spark, StoreConfig(name="warm", path=str(warm), ttl=60_000),
                            wall_clock=WallClock())
    for k in range(2):
        warm_store.apply_records([InputRecord(b"w%d" % j, b"v", WallClock().now_ms(), (), 0,
                                              k * 100 + j) for j in range(100)])
    Tables.drop(warm.parent)
    path = tables.new() / "store"
    conf = from_dict({"store": {"name": "bench", "path": str(path), "ttl": ttl},
                      "kafka": {"input_topic": "unused", "changelog_topic": "unused"},
                      "eviction": {"clock": "wall", "interval": interval},
                      "maintenance": {"optimize_interval": None, "vacuum_interval": None},
                      "stream": {"checkpoint": str(path.parent / "checkpoint")}})
    clock = WallClock()
    store = DeltaStore(spark, conf.store, wall_clock=clock)
    lock = threading.Lock()
    jobs = schedule.StoreJobs(store.for_thread(), conf, lock=lock)
    results: list[eviction.SweepResult] = []
    plain = jobs.wall_sweep

    def recording_sweep():
        result = plain()
        if result is not None:
            results.append(result)
        return result

    jobs.wall_sweep = recording_sweep  # type: ignore[method-assign]
    scheduler = schedule.build(conf, jobs, blocking=False)
    apply_s: list[float] = []
    written = 0
    counts: dict[str, int] = {}
    scheduler.start()
    started = time.monotonic()
    try:
        i = 0
        while time.monotonic() - started < duration:
            tick = time.monotonic()
            with lock:  # stamp inside the lock: a sweep may hold it for seconds
                now = clock.now_ms()
                records = [InputRecord(f"b{i}-{j}".encode(), b"v", now, (), 0, i * batch + j)
                           for j in range(batch)]
                t0 = time.monotonic()
                wrote = store.apply_records(records)
                apply_s.append(time.monotonic() - t0)
            for name, value in wrote.counts.as_dict().items():
                if isinstance(value, int):
                    counts[name] = counts.get(name, 0) + value
            written += batch
            i += 1
            # at least a short gap: a thread that releases a Lock and takes it again at once
            # can starve the sweep thread waiting on it
            time.sleep(max(0.1, every - (time.monotonic() - tick)))
    finally:
        scheduler.shutdown(wait=True)
    elapsed = time.monotonic() - started
    print(f"  wrote {written:,} keys in {i} batches over {elapsed:.0f} s (apply_records "
          f"median {statistics.median(apply_s):.2f} s, max {max(apply_s):.2f} s); "
          f"{len(results)} sweeps, {sum(r.evicted for r in results):,} evicted; loadavg "
          f"{loadavg()}", flush=True)
    print(f"  write counts: {counts}", flush=True)
    for r in results:
        print(f"    sweep v{r.version}: evicted {r.evicted:>5}, {r.seconds:5.2f} s, "
              f"lateness ms {r.lateness_ms}", flush=True)
    swept = [r for r in results if r.evicted]
    for q in ("p50", "p99", "max"):
        print(f"  per-sweep lateness {q} (ms) over {len(swept)} sweeps: "
              f"{_quantiles([r.lateness_ms[q] for r in swept])}", flush=True)
    if swept:
        versions = spark.createDataFrame([(r.version, r.t) for r in swept], "v long, t long")
        gone = (spark.read.format("delta").option("readChangeFeed", "true")
                .option("startingVersion", min(r.version for r in swept))
                .option("endingVersion", max(r.version for r in swept)).load(str(path))
                .where("_change_type = 'delete'")
                .join(versions, F.col("_commit_version") == F.col("v")))
        by_t = F.col("t") - F.col("expires_at")
        by_commit = F.unix_millis(F.col("_commit_timestamp")) - F.col("expires_at")
        row = gone.select(F.count("*").alias("n"),
                          F.percentile_approx(by_t, [0.5, 0.99]).alias("qt"),
                          F.max(by_t).alias("mt"),
                          F.percentile_approx(by_commit, [0.5, 0.99]).alias("qc"),
                          F.max(by_commit).alias("mc")).first()
        print(f"  row-level lateness over {row.n:,} evicted rows: T - expires_at: "
              f"p50={row.qt[0]:,} p99={row.qt[1]:,} max={row.mt:,} ms; commit time - "
              f"expires_at: p50={row.qc[0]:,} p99={row.qc[1]:,} max={row.mc:,} ms", flush=True)
    if verbose:
        from delta.tables import DeltaTable

        from ttl import commit

        print("  history:", flush=True)
        for h in (DeltaTable.forPath(spark, str(path)).history()
                  .orderBy("version").collect()):
            meta = commit.decode(h.userMetadata) or {}
            om = h.operationMetrics or {}
            print(f"    v{h.version} {h.timestamp} {h.operation} op={meta.get('op')} "
                  f"t={meta.get('t')} deleted={om.get('numDeletedRows')} "
                  f"inserted={om.get('numTargetRowsInserted')}", flush=True)
    live = store.live_frame().count()
    table = spark.read.format("delta").load(str(path)).count()
    print(f"  at the end: {table:,} rows in the table, {live:,} live (expired but not yet "
          f"swept: {table - live:,})", flush=True)
    Tables.drop(path.parent)


# -- main -------------------------------------------------------------------------------------

def warm_up(spark, tables: Tables) -> None:
    """One small sweep first, so JIT and first-query costs do not land on part 1."""
    store = build_store(spark, tables, 20_000, 200, "separate")
    eviction.sweep(store, "wall", NOW)
    Tables.drop(Path(store.path).parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--big", type=int, default=None,
                        help="also run parts 1 and 2 at this N (opt-in, e.g. 10000000)")
    parser.add_argument("--parts", default="123", help="which parts to run, e.g. 12 or 3")
    parser.add_argument("--optimize-file-mb", type=int, default=1,
                        help="small OPTIMIZE target file size for part 2 (MB)")
    parser.add_argument("--ttl", default="5s")
    parser.add_argument("--interval", default="10s")
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--every", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=90.0)
    parser.add_argument("--history", action="store_true",
                        help="part 3: print the table's commit history")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    spark = get_session()
    print(f"machine: nproc={os.cpu_count()}, loadavg="
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; spark {spark.version}, "
          f"master {spark.sparkContext.master}", flush=True)
    tables = Tables()
    started = time.monotonic()
    try:
        if "1" in args.parts or "2" in args.parts:
            warm_up(spark, tables)
        if "1" in args.parts:
            for n in [args.keys] + ([args.big] if args.big else []):
                part1(spark, tables, n)
        if "2" in args.parts:
            sizes = sorted({SMALL_N, args.keys} | ({args.big} if args.big else set()))
            part2(spark, tables, sizes, args.optimize_file_mb)
        if "3" in args.parts:
            part3(spark, tables, ttl=args.ttl, interval=args.interval, batch=args.batch,
                  every=args.every, duration=args.duration, verbose=args.history)
    finally:
        tables.close()
    print(f"\ntotal {time.monotonic() - started:.0f} s", flush=True)


if __name__ == "__main__":
    main()
