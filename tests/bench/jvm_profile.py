"""Where a ttl JVM's CPU goes while its batches run: a Java Flight Recording, summarized.

``compare --jfr DIR`` starts ``ttl run`` with a recording (``-XX:StartFlightRecording``,
the JDK's own sampling profiler: no agent, no download) and prints this summary for the
batches' window (the first batch, with the JVM's warm-up, left out):

* the JVM's garbage collection (``jdk.GCCPUTime``) and JIT compilation
  (``jdk.Compilation``, its duration: compiler threads are not sampled) in CPU-seconds;
* the Java samples (``jdk.ExecutionSample``) split by what the batch does: the Kafka
  source's read, turning it into Arrow for the driver, the write's frame built from Arrow,
  the Parquet write, Spark's code generation, Delta's log and snapshot, query planning, task
  serialization and scheduling, the rest.

Why: both workloads keep this machine's cores busy and the JVM does most of the work
(``compare``'s CPU split); this says which of its parts to cut next. The recording is
kept in DIR for ``jfr print`` or JDK Mission Control.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
from collections import Counter
from pathlib import Path

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
    ("Parquet write", ("org/apache/parquet/", "DeltaFileFormatWriter",
                       "datasources/FileFormatWriter")),
    ("Delta log and snapshot", ("sql/delta/Snapshot", "sql/delta/DeltaLog",
                                "sql/delta/Checkpoint", "sql/delta/stats/",
                                "sql/delta/actions/", "sql/delta/SnapshotManagement",
                                "sql/delta/util/JsonUtils", "com/fasterxml/jackson")),
    ("Delta commit and commands", ("sql/delta/",)),
    ("query planning", ("sql/catalyst/analysis/", "sql/catalyst/optimizer/",
                        "sql/catalyst/rules/", "sql/execution/QueryExecution",
                        "sql/execution/SparkStrategies", "sql/catalyst/trees/")),
    ("task serialization and scheduling", ("java/io/ObjectOutputStream",
                                           "java/io/ObjectInputStream", "spark/scheduler/",
                                           "spark/serializer/")),
)


def jfr_option(path: Path) -> str:
    """The JVM option that records the whole run into ``path`` (sampling every 10 ms)."""
    return f"-XX:StartFlightRecording=filename={path},settings=profile"


def _events(path: Path, event: str, depth: int = 1) -> list[dict]:
    out = subprocess.run(["jfr", "print", "--json", "--stack-depth", str(depth), "--events",
                          event, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)["recording"]["events"]


def _epoch(stamp: str) -> float:
    """A JFR time (ISO 8601, UTC, nanoseconds) as epoch seconds."""
    return dt.datetime.fromisoformat(stamp[:26].rstrip("Z") + "+00:00").timestamp()


def _seconds(duration: str) -> float:
    """A JFR duration (``PT1M2.5S``) in seconds."""
    m = re.fullmatch(r"PT(?:(\d+)H)?(?:(\d+)M)?(?:([\d.]+)S)?", duration)
    if m is None:
        return 0.0
    h, mins, s = m.groups()
    return int(h or 0) * 3600 + int(mins or 0) * 60 + float(s or 0)


def part_of(frames: list[str]) -> str:
    for part, fragments in PARTS:
        if any(f in frame for frame in frames for f in fragments):
            return part
    return "other"


def summarize(path: Path, start: float, end: float) -> dict:
    """The recording between ``start`` and ``end`` (epoch seconds): ``gc_s`` and ``jit_s``
    (CPU-seconds), ``samples`` and each part's share of them."""
    def inside(e: dict) -> bool:
        return start <= _epoch(e["values"]["startTime"]) <= end

    gc = sum(_seconds(e["values"]["userTime"]) + _seconds(e["values"]["systemTime"])
             for e in _events(path, "jdk.GCCPUTime") if inside(e))
    jit = sum(_seconds(e["values"]["duration"])
              for e in _events(path, "jdk.Compilation") if inside(e))
    parts: Counter = Counter()
    for e in _events(path, "jdk.ExecutionSample", depth=256):
        if not inside(e):
            continue
        trace = e["values"].get("stackTrace") or {}
        names = [f["method"]["type"]["name"] + "." + f["method"]["name"]
                 for f in trace.get("frames", [])]
        parts[part_of(names)] += 1
    total = sum(parts.values())
    return {"gc_s": gc, "jit_s": jit, "samples": total,
            "parts": {p: n / total for p, n in parts.most_common()} if total else {}}


def line(summary: dict, per: float) -> str:
    """Two lines for ``compare``: GC and JIT CPU-seconds per 100k records (``per`` scales
    the window's to that), and the Java samples' split."""
    split = ", ".join(f"{p} {share:.0%}" for p, share in summary["parts"].items())
    return (f"  JVM profile: GC {summary['gc_s'] * per:.2f} and JIT "
            f"{summary['jit_s'] * per:.2f} CPU-s per 100k records; Java samples "
            f"({summary['samples']:,}): {split}")
