"""Benchmark: the executors' fold reading the table through its path against over its
files listed once (``delta_log.table_at``), alternated in one process (prints figures);
with ``--vs-delta-write``, the executors' replace by position against Delta's replace.

    .venv/bin/python -m tests.bench.table_read                       # 1M keys, 5 pairs
    .venv/bin/python -m tests.bench.table_read --keys 10000000 --pairs 3
    .venv/bin/python -m tests.bench.table_read --vs-delta-write

Builds a ``key_hash``-ordered table (``tests.bench.big_state``), then runs W2-shaped
batches (``--batch`` uniform updates of stored keys) through ``DeltaStore.apply_frame``,
the executors' path, in ``local[2]``: each pair one batch with the table read through its
path (``versionAsOf``, how the fold read it before) and one with ``table_at``, in
alternating order, 2 s apart (the previous commit's snapshot computed meanwhile). Prints
each batch's time, the JVM's CPU (driver and local executors: one process) and its Spark
jobs, then the medians and the pairs' time ratios (docs/scaling.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from tests.bench import big_state, compare
from ttl import delta_log
from ttl.clock import FixedClock
from ttl.config import StoreConfig
from ttl.phases import BatchPhases
from ttl.spark import get_session
from ttl.store import DeltaStore
from ttl.store.write import POSITIONAL_ENABLED


def through_path(spark, path: str, version: int):
    """The table at ``version`` as the fold read it before ``table_at``."""
    return spark.read.format("delta").option("versionAsOf", version).load(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--vs-delta-write", action="store_true",
                        help="Alternate the executors' replace by position (the fold's "
                             "rows) with Delta's replace, the table read listed once.")
    args = parser.parse_args()

    spark = get_session()
    work = Path(tempfile.mkdtemp(prefix="ttl-table-read-"))
    path = str(work / "store")
    conf = StoreConfig(name="read", path=path, ttl=big_state.TTL)
    DeltaStore(spark, conf, wall_clock=FixedClock(big_state.NOW))  # the empty table
    big_state.build(spark, path, args.keys, 100_000, "clustered")
    store = DeltaStore(spark, conf, wall_clock=FixedClock(big_state.NOW))
    jobs = spark._jsc.sc().statusStore()
    jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    listed_once = delta_log.table_at

    def jvm_cpu_s() -> float:
        return compare._ticks(jvm_pid) / os.sysconf("SC_CLK_TCK")

    def jobs_since(t0_ms: int) -> int:
        found, it = 0, jobs.jobsList(None).iterator()
        while it.hasNext():
            submitted = it.next().submissionTime()
            found += not submitted.isEmpty() and submitted.get().getTime() >= t0_ms
        return found

    before, after = ("delta write", "positional") if args.vs_delta_write else (
        "path", "listed once")

    def take(side: str) -> None:
        if args.vs_delta_write:  # the store's own session: its batches read it there
            store.spark.conf.set(POSITIONAL_ENABLED, str(side == "positional").lower())
        else:
            delta_log.table_at = through_path if side == "path" else listed_once

    out: dict[str, list[tuple[float, float, int]]] = {before: [], after: []}
    number = 0
    try:
        for pair in range(-1, args.pairs):  # the first pair warms the JVM up: not reported
            for side in ((before, after) if pair % 2 == 0 else (after, before)):
                take(side)
                number += 1
                frame = spark.createDataFrame(big_state._updates(
                    spark, args.keys, args.batch, 9_000 + number))
                time.sleep(2.0)  # as a trigger: the previous commit's snapshot is ready
                t0_ms, cpu0, started = int(time.time() * 1000), jvm_cpu_s(), time.monotonic()
                phases = BatchPhases()
                result = store.apply_frame(frame, wall_ms=big_state.NOW + number,
                                           txn=("read", number), metadata=lambda figures: {},
                                           phases=phases)
                took, cpu = time.monotonic() - started, jvm_cpu_s() - cpu0
                time.sleep(2.0)  # the background snapshot's jobs are counted with the batch
                count = jobs_since(t0_ms)
                print(f"{side:12s} {took:6.2f} s  JVM CPU {cpu:6.2f} s  jobs {count}  "
                      f"write {result.write}  "
                      + " ".join(f"{k} {v:.2f}" for k, v in phases.seconds.items()), flush=True)
                if pair >= 0:
                    out[side].append((took, cpu, count))
    finally:
        delta_log.table_at = listed_once
        spark.stop()
    for side, rows in out.items():
        print(f"{side:12s} median {statistics.median(r[0] for r in rows):.2f} s, "
              f"JVM CPU {statistics.median(r[1] for r in rows):.2f} s, "
              f"jobs {statistics.median(r[2] for r in rows):g}")
    ratios = [a[0] / b[0] for a, b in zip(out[after], out[before], strict=True)]
    print(f"{after} / {before}, each pair:", " ".join(f"{r:.2f}" for r in ratios),
          f"(median {statistics.median(ratios):.2f})")


if __name__ == "__main__":
    main()
