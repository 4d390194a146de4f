"""Where a ttl JVM's Java threads spend their CPU while its batches run: a Java Flight
Recording, summarized.

``compare --jfr DIR`` starts ``ttl run`` with a recording (``-XX:StartFlightRecording``,
the JDK's own sampling profiler: no agent, no download) and prints the Java samples
(``jdk.ExecutionSample``) of the batches' window (the first batch, with the JVM's warm-up,
left out) split by what the batch was doing: the Kafka source's read, turning it into Arrow
for the driver, the write's frame built from Arrow, the Parquet write, Parquet and JSON
reads (Delta's log, a replace's scan), Spark's code generation, query planning, task
serialization and scheduling, Delta's log and snapshot, Delta's other work, the rest.
Each sample is labelled by the first part (in ``PARTS`` order) one of whose frames it
holds, so the split is a guide, not an exact account. The JIT compiler and GC threads are
native, never sampled: ``compare``'s CPU split measures them from ``/proc``. The
recording (which costs a few percent of the run's speed) stays in DIR for ``jfr print``
or JDK Mission Control.

Why: both workloads keep this machine's cores busy and the JVM does most of the work; this
says which of its parts to cut next.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
from collections import Counter
from pathlib import Path

from tests.support import wait_until

#: (part, frame-name fragments): a sample belongs to the first part one of whose fragments
#: is in any of its frames (code generation first: it runs inside every other part).
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("code generation", ("expressions/codegen/", "org/codehaus/janino")),
    ("Kafka source read", ("sql/kafka010/", "org/apache/kafka/")),
    ("rows to Arrow (the read)", ("ArrowConverters$ArrowBatchIterator",
                                  "collectAsArrowToPython")),
    ("Arrow to rows (the write's input)", ("ArrowConverters$.toDataFrame",
                                           "ArrowConverters$.fromBatch",
                                           "vectorized/ArrowColumnVector")),
    ("Parquet write", ("ParquetWriteSupport", "ParquetOutputWriter", "ParquetRecordWriter",
                       "parquet/column/impl/ColumnWriter", "DeltaFileFormatWriter",
                       "datasources/FileFormatWriter")),
    ("Parquet and JSON reads", ("ParquetFileReader", "VectorizedParquetRecordReader",
                                "parquet/column/impl/ColumnReader", "datasources/json/")),
    ("query planning", ("sql/catalyst/analysis/", "sql/catalyst/optimizer/",
                        "sql/catalyst/rules/RuleExecutor", "sql/execution/QueryExecution",
                        "sql/execution/SparkStrategies", "sql/execution/SparkPlanner")),
    ("task serialization and scheduling", ("java/io/ObjectOutputStream",
                                           "java/io/ObjectInputStream", "spark/serializer/",
                                           "scheduler/TaskSetManager",
                                           "scheduler/TaskSchedulerImpl",
                                           "scheduler/DAGScheduler")),
    ("Delta log and snapshot", ("sql/delta/Snapshot", "sql/delta/DeltaLog",
                                "sql/delta/Checkpoint", "sql/delta/stats/",
                                "sql/delta/actions/", "sql/delta/SnapshotManagement",
                                "sql/delta/util/JsonUtils", "com/fasterxml/jackson")),
    ("Delta's other work", ("sql/delta/",)),
)

#: Frames kept per sample: Spark's stacks run deeper than JFR's default of 64, and a sample
#: is labelled by any of its frames.
STACK_DEPTH = 512


def jfr_option(path: Path) -> str:
    """The JVM options that record the whole run into ``path`` (sampling every 10-20 ms)."""
    return (f"-XX:FlightRecorderOptions:stackdepth={STACK_DEPTH} "
            f"-XX:StartFlightRecording=filename={path},settings=profile")


def wait_for_exit(pids: list[int], timeout_s: float = 120.0) -> None:
    """Wait until the JVM is gone: it writes its recording as it exits, which is after the
    ``ttl`` process that started it (PySpark's JVM ends on its own once its parent has)."""
    wait_until(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in pids),
               timeout=timeout_s, interval=0.2, what=f"the JVM ({pids}) to exit after ttl")


def _events(path: Path, event: str, depth: int = 1) -> list[dict]:
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", str(depth), "--events",
                          event, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["recording"]["events"]


def _epoch(stamp: str) -> float:
    """A JFR time (ISO 8601 with up to nanoseconds and the recording's offset) as epoch
    seconds."""
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", stamp)
    if m is None:
        raise ValueError(f"not a JFR time: {stamp!r}")
    whole, fraction, zone = m.groups()
    zone = "+00:00" if zone in (None, "Z") else zone
    return (dt.datetime.fromisoformat(whole + zone).timestamp()
            + float(f"0.{fraction or 0}"))


def part_of(frames: list[str]) -> str:
    for part, fragments in PARTS:
        if any(f in frame for frame in frames for f in fragments):
            return part
    return "other"


def summarize(path: Path, start: float, end: float) -> dict:
    """The recording's Java samples between ``start`` and ``end`` (epoch seconds):
    ``samples`` and each part's share of them."""
    parts: Counter = Counter()
    for e in _events(path, "jdk.ExecutionSample", depth=STACK_DEPTH):
        if not start <= _epoch(e["values"]["startTime"]) <= end:
            continue
        trace = e["values"].get("stackTrace") or {}
        names = [f["method"]["type"]["name"] + "." + f["method"]["name"]
                 for f in trace.get("frames", [])]
        parts[part_of(names)] += 1
    total = sum(parts.values())
    return {"samples": total,
            "parts": {p: n / total for p, n in parts.most_common()} if total else {}}


def line(summary: dict) -> str:
    """The Java samples' split, one line for ``compare``."""
    split = ", ".join(f"{p} {share:.0%}" for p, share in summary["parts"].items())
    return f"  JVM profile, Java samples ({summary['samples']:,}): {split}"
