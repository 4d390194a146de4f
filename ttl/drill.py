"""Restore drills: prove that the changelog rebuilds the table (docs/semantics.md).

1. read the last fully published version V (the progress topic), *then* the end offsets;
2. restore into a scratch table up to ``ttl.version <= V`` (records after V are in flight,
   not differences), without TTL filtering. The scratch table is a fresh directory under
   ``drill.scratch`` (default ``<store path>_drill_scratch``), on the store's file system
   because the executors write it, and is removed afterwards, also after a failure, through
   Hadoop's FileSystem API, so ``file:``, ``s3a:`` and ``abfss:`` alike;
3. diff with the live table ``VERSION AS OF V`` (Delta time travel) by key: missing, extra,
   and different (value, ts, headers, expires_at; never updated_at);
4. write a JSON report, print a summary, append the result to the drill-history Delta table
   (``<store path>_drills``, ``ttl.names.DRILLS_SUFFIX``), and exit 0 only on an exact match.

A drill warns when the restore took more than ``SAFE_SHARE`` of the topic's
``delete.retention.ms``: a tombstone compacted away before a restore reads it brings its key
back.
"""

from __future__ import annotations

import json
import logging
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ttl import delta_log
from ttl.changelog.format import table_version
from ttl.changelog.progress import read_progress
from ttl.clock import WallClock
from ttl.config import Config
from ttl.errors import RestoreError
from ttl.kafka import KafkaClients
from ttl.names import DRILL_SCRATCH_SUFFIX, DRILLS_SUFFIX, progress_topic, sibling
from ttl.restore import restore
from ttl.store.layout import PLAIN_TABLE

log = logging.getLogger(__name__)

SAFE_SHARE = 0.1
DRILL_COLUMNS = ("store string, version bigint, started_at bigint, match boolean, "
                 "missing bigint, extra bigint, different bigint, keys bigint, "
                 "records_read bigint, restore_seconds double, report string")
COMPARED = ("value", "ts", "headers", "expires_at")


@dataclass
class DrillReport:
    store: str
    version: int
    topic: str
    started_at: int
    records_read: int = 0
    keys: int = 0
    restore_seconds: float = 0.0
    restore_rate: float = 0.0
    missing: int = 0
    extra: int = 0
    different: int = 0
    samples: dict[str, list[str]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    scratch: str = ""  # the drill's scratch table (removed when the drill ends)

    @property
    def match(self) -> bool:
        return self.missing == self.extra == self.different == 0

    def summary(self) -> str:
        verdict = "MATCH" if self.match else "MISMATCH"
        lines = [f"drill {verdict}: changelog {self.topic} vs {self.store} at version "
                 f"{self.version}: {self.keys} keys, missing {self.missing}, extra "
                 f"{self.extra}, different {self.different}",
                 f"restore: {self.records_read} records in {self.restore_seconds:.1f} s "
                 f"({self.restore_rate:,.0f} records/s)"]
        lines += [f"  {kind}: {', '.join(keys)}" for kind, keys in self.samples.items() if keys]
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "match": self.match}, indent=2, sort_keys=True)


def diff(spark, live, rebuilt, sample: int = 5) -> tuple[int, int, int, dict[str, list[str]]]:
    """Missing, extra and different keys between two store frames, with sample keys."""
    from pyspark.sql import functions as F

    a = live.select("key", *[F.col(c).alias(f"l_{c}") for c in COMPARED], F.lit(1).alias("l"))
    b = rebuilt.select("key", *[F.col(c).alias(f"r_{c}") for c in COMPARED],
                       F.lit(1).alias("r"))
    joined = a.join(b, "key", "full_outer")
    same = F.lit(True)
    for c in COMPARED:
        same = same & F.col(f"l_{c}").eqNullSafe(F.col(f"r_{c}"))
    kind = (F.when(F.col("r").isNull(), "missing").when(F.col("l").isNull(), "extra")
            .when(~same, "different"))
    labelled = joined.select("key", kind.alias("kind")).where("kind IS NOT NULL").cache()
    counts = {r.kind: r["count"] for r in labelled.groupBy("kind").count().collect()}
    samples = {k: [bytes(r.key).decode("utf-8", "replace") for r in
                   labelled.where(F.col("kind") == k).limit(sample).collect()]
               for k in ("missing", "extra", "different")}
    labelled.unpersist()
    return counts.get("missing", 0), counts.get("extra", 0), counts.get("different", 0), samples


def run(spark, conf: Config, kafka: KafkaClients, *, report_path: Path | None = None,
        source_topic: str | None = None, wall_ms: int | None = None) -> DrillReport:
    """One drill (module docstring); the report says whether the rebuild matched."""

    root = scratch_root(conf)
    _check_scratch_root(spark, root)
    progress = read_progress(kafka, progress_topic(conf.kafka.changelog_topic))
    if progress.version < 0:
        raise RestoreError("nothing has been published yet: run the stream (or publish) first")
    report = DrillReport(conf.store.name, progress.version,
                         source_topic or conf.kafka.changelog_topic, WallClock().now_ms())
    scratch = report.scratch = scratch_path(root, conf.store.name, report.started_at)
    try:
        result = restore(spark, conf, kafka, scratch, until_version=progress.version,
                         point_is_progress=True,
                         source_topic=source_topic, wall_ms=wall_ms)
        report.records_read, report.keys = result.records_read, result.keys_restored
        report.restore_seconds, report.restore_rate = result.seconds, result.rate
        live = spark.read.format("delta").option("versionAsOf", _table_version(
            spark, conf.store.path, progress.version)).load(conf.store.path)
        rebuilt = spark.read.format("delta").load(scratch)
        report.missing, report.extra, report.different, report.samples = diff(
            spark, live, rebuilt)
        report.warnings += result.warnings + _retention_warning(result.topic_settings, report)
    finally:
        report.warnings += _remove_scratch(spark, scratch)
    _record_drill(spark, conf, report)
    if report_path is not None:
        report_path.write_text(report.to_json())
    log.info("%s", report.summary())
    return report


def scratch_root(conf: Config) -> str:
    """Where drills' scratch tables live: ``drill.scratch``, else beside the store (its file
    system is one every executor writes, which the driver's /tmp is not on a cluster)."""
    return conf.drill.scratch or sibling(conf.store.path, DRILL_SCRATCH_SUFFIX)


def scratch_path(root: str, store: str, started_at: int) -> str:
    """A fresh directory under ``root`` for one drill: concurrent drills (a scheduled one
    and an operator's) never share a table, and the name says whose and when."""
    return f"{root.rstrip('/')}/{store}-{started_at}-{uuid.uuid4().hex[:12]}"


def _hadoop_path(spark, location: str):
    """``location`` as a Hadoop path and its file system, as the executors resolve it (the
    session's Hadoop configuration: s3a credentials, abfss accounts, the default FS)."""
    sc = spark.sparkContext
    path = sc._jvm.org.apache.hadoop.fs.Path(location)
    return path, path.getFileSystem(sc._jsc.hadoopConfiguration())


def _check_scratch_root(spark, root: str) -> None:
    """A root that is a file would fail the restore only after the topic is read, with
    Hadoop's error: fail first, naming the setting."""
    path, fs = _hadoop_path(spark, root)
    if fs.exists(path) and not fs.getFileStatus(path).isDirectory():
        raise RestoreError(f"drill.scratch: {root} is a file, not a directory: set "
                           "drill.scratch to a directory on the store's file system (or "
                           f"remove the file; unset, it is <store path>{DRILL_SCRATCH_SUFFIX})")


def _remove_scratch(spark, scratch: str) -> list[str]:
    """Delete the drill's scratch directory (recursively; absent is fine: the drill failed
    before writing it). A failed delete must not hide the drill's own outcome or error: it
    becomes a warning naming the directory to remove by hand."""
    try:
        path, fs = _hadoop_path(spark, scratch)
        fs.delete(path, True)
    except Exception as exc:  # noqa: BLE001 - any failure: say which directory is left
        log.warning("drill: could not remove its scratch table %s: %s", scratch, exc)
        return [f"the scratch table {scratch} could not be removed ({exc}); remove it"]
    return []


def _table_version(spark, path: str, changelog_version: int) -> int:
    """The live table's Delta version of a changelog version (its version offset off)."""

    return table_version(changelog_version, delta_log.properties(spark, path))


def _retention_warning(settings: dict[str, str], report: DrillReport) -> list[str]:
    """The topic's settings come from the restore's own check: no second describe."""
    raw = settings.get("delete.retention.ms")
    if raw is None:
        return []
    limit = SAFE_SHARE * int(raw) / 1000
    if report.restore_seconds > limit:
        return [f"the restore took {report.restore_seconds:.0f} s, more than {SAFE_SHARE:.0%} "
                f"of delete.retention.ms ({int(raw) / 1000:.0f} s): tombstones could be "
                "compacted away before a restore reads them; raise "
                "changelog.delete_retention"]
    return []


def _record_drill(spark, conf: Config, report: DrillReport) -> None:
    row = [(report.store, report.version, report.started_at, report.match, report.missing,
            report.extra, report.different, report.keys, report.records_read,
            float(report.restore_seconds), report.to_json())]
    frame = spark.createDataFrame(row, DRILL_COLUMNS)
    path = sibling(conf.store.path, DRILLS_SUFFIX)
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({DRILL_COLUMNS}) USING delta "
              f"{PLAIN_TABLE}")
    frame.write.format("delta").mode("append").save(path)

