"""Benchmark: the batch write path on a large store (prints figures; not a test).

    .venv/bin/python -m tests.bench.store_bench --keys 1000000 --batches 5
    .venv/bin/python -m tests.bench.store_bench --keys 10000000   # opt-in, long

Loads N keys straight into a v3 table (one bulk write), then applies update batches of
``--batch`` records through ``DeltaStore.apply_batch`` (5% out-of-order timestamps,
``--deletes`` of them deletes (1% by default), keys drawn uniformly from the N), with and
without deletion vectors, and prints records/s, the per-commit time of each batch, the write
it made (a replace when the batch upserts a key, a MERGE when it only removes keys), its
Spark jobs and its per-phase split (the input is turned into Arrow before the clock starts,
as the stream's read phase does).

    .venv/bin/python -m tests.bench.store_bench --deletion-vectors on --deletes 0
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.phases import BatchPhases
from ttl.spark import get_session
from ttl.store import DeltaStore

NOW = 1_700_000_000_000
TTL = 7 * 86_400_000


def _load(spark, store: DeltaStore, keys: int) -> float:
    from pyspark.sql import functions as F

    started = time.monotonic()
    rows = spark.range(keys).select(
        F.unhex(F.sha2(F.col("id").cast("string"), 256).substr(1, 16)).alias("key"),
        F.concat(F.lit(b"value-"), F.col("id").cast("string").cast("binary")).alias("value"),
        (F.lit(NOW - 3_600_000) + F.col("id") % 1000).alias("ts"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
    ).withColumn("expires_at", F.col("ts") + F.lit(TTL)) \
     .withColumn("updated_at", F.lit(NOW)) \
     .withColumn("key_hash", F.xxhash64("key")) \
     .withColumn("record_ttl", F.lit(None).cast("bigint"))
    rows.write.format("delta").mode("append").save(store.path)
    return time.monotonic() - started


def _batch(spark, keys: int, size: int, seed: int, deletes: float = 0.01):
    from pyspark.sql import functions as F

    ids = (F.abs(F.xxhash64(F.col("id"), F.lit(seed))) % keys)
    r = F.rand(seed)
    return spark.range(size).select(
        F.unhex(F.sha2(ids.cast("string"), 256).substr(1, 16)).alias("key"),
        F.when(r < deletes, F.lit(None).cast("binary"))
         .otherwise(F.concat(F.lit(b"new-"), F.col("id").cast("string").cast("binary")))
         .alias("value"),
        F.when(r > 0.95, F.lit(NOW - 7_200_000)).otherwise(F.lit(NOW) + F.col("id") % 1000)
         .alias("timestamp"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
        F.lit(0).alias("partition"),
        (F.lit(seed * size) + F.col("id")).alias("offset"),
    )


def run(keys: int, batches: int, size: int, deletion_vectors: bool,
        deletes: float = 0.01) -> dict:
    spark = get_session()
    work = Path(tempfile.mkdtemp(prefix="ttl-bench-"))
    try:
        conf = StoreConfig(name="bench", path=str(work / "store"), ttl=TTL)
        store = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))
        if not deletion_vectors:
            spark.sql(f"ALTER TABLE delta.`{conf.path}` "
                      "SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'false')")
        load_s = _load(spark, store, keys)
        times = []
        for i in range(batches):
            frame = _batch(spark, keys, size, seed=i + 1, deletes=deletes)
            records = frame.toArrow()
            phases = BatchPhases(spark)
            started = time.monotonic()
            result = store.apply_batch(records, wall_ms=NOW + i, phases=phases)
            times.append(time.monotonic() - started)
            jobs = phases.spark_jobs()
            phases.close()
            split = " ".join(f"{k}={v:.2f}" for k, v in phases.as_dict().items()
                             if k != "total")
            print(f"  batch {i}: {times[-1]:.2f} s, {size / times[-1]:,.0f} records/s, "
                  f"write={getattr(result, 'write', '?')} spark_jobs={jobs} {split} "
                  f"{result.counts.as_dict()}", flush=True)
        files = spark.sql(f"DESCRIBE DETAIL delta.`{conf.path}`").first()["numFiles"]
        return {"keys": keys, "deletion_vectors": deletion_vectors, "load_s": load_s,
                "median_commit_s": statistics.median(times), "max_commit_s": max(times),
                "records_per_s": size / statistics.median(times), "files": files}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--deletion-vectors", choices=("both", "on", "off"), default="both")
    parser.add_argument("--deletes", type=float, default=0.01,
                        help="Share of a batch's records that are deletes (0: none, so no "
                             "batch removes a key).")
    args = parser.parse_args()
    choices = {"both": (True, False), "on": (True,), "off": (False,)}[args.deletion_vectors]
    for dv in choices:
        print(f"N={args.keys:,} keys, batches of {args.batch:,}, deletion vectors={dv}, "
              f"deletes={args.deletes:g}")
        figures = run(args.keys, args.batches, args.batch, dv, args.deletes)
        print("  " + ", ".join(f"{k}={v:,.2f}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in figures.items()), flush=True)


if __name__ == "__main__":
    main()
