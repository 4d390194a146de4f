"""Benchmark: ``ttl`` against two hand-written baselines and the machine's ceilings, one run.

    .venv/bin/python -m tests.bench.compare                         # W1/W2 of 1,000,000 records
    .venv/bin/python -m tests.bench.compare --records 200000        # a quicker run
    .venv/bin/python -m tests.bench.compare --skip-b --skip-latency # parts can be left out
    .venv/bin/python -m tests.bench.compare --jfr /tmp/jfr          # and where the JVM's CPU goes

Starts a local Kafka broker, produces each workload once into one input topic (2
partitions), and runs every system over the same records, one after the other:

* **ttl**: ``ttl run --conf FILE --available-now`` in a subprocess, as a user runs it
  (``max_offsets_per_trigger = 100000``, TTL 1 day, changelog published);
* **A, a hand-written Delta job**: Kafka source, ``foreachBatch``: the last record per key by
  (timestamp, offset), one MERGE upsert (last writer wins on ts; a null value deletes), and a
  ``DELETE WHERE expires_at <= now`` every 10 s; no changelog, no dead letters;
* **B, PySpark ``transformWithState``**: a ``ValueState`` with a TTL (``ttlDurationMs``),
  RocksDB state store, Kafka in, every change out to a Kafka topic;
* **ceilings**: draining the input topic with a plain confluent-kafka consumer, and Spark
  writing the same number of rows of the same shape to Parquet.

Workloads: **W1** ``--records`` new keys; **W2** ``--records`` updates over those keys
(uniform, 5% out of order by up to an hour, 1% deletes); both 100-byte values and 2 headers.
**W3** (ttl only): a trickle of 20 records/s for ``--trickle-seconds``, latency from produce
to changelog record. **W4**: ``ttl restore`` of the changelog W1+W2 left, against draining
that changelog with a plain consumer.

Records/s of a streaming run is over the sum of its batch durations (``ttl.batch``
``duration_s``, plus the last batch's publication, which no next batch overlaps;
``lastProgress`` ``triggerExecution`` for A and B), so JVM and Python worker start-up do not
count, and again over the second half of the batches: each ``ttl run`` starts its own JVM,
whose JIT compiler is still busy in the first batches, while A and B run in the benchmark's
JVM, warm by then; ttl's end-to-end wall time (start-up included) is printed beside it, and
so is how busy the machine's cores were while ttl's batches ran (``/proc``), with the
CPU-seconds per 100k records of ttl's Python process, its JVM (of that, its JIT compiler's
and garbage collector's threads), the broker and the rest: what bounds a run that keeps
every core busy, and where that work is. ``--jfr DIR`` also profiles the JVM's Java threads
(``jvm_profile``).
Absolute figures move with the machine's load; the ratios, from one run, are the result.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.bench import jvm_profile
from tests.bench import stream_bench as sb
from tests.bench.machine import machine_facts
from ttl.config import load
from ttl.local.kafka import LocalKafka

TTL_MS = 86_400_000
MAX_OFFSETS = 100_000
EOF = -191  # KafkaError._PARTITION_EOF


# -- workloads ----------------------------------------------------------------------------------

def key_of(i: int) -> bytes:
    return b"k%08d" % i


def produce(bootstrap: str, name: str, records: int, *, updates: bool, seed: int) -> float:
    """W1 (``updates`` false): keys 0..records-1 once each; W2: uniform updates over them,
    5% out of order (timestamp up to an hour back), 1% deletes. 100-byte values, 2 headers.
    Returns seconds."""
    rng = random.Random(seed)
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "log_level": 3})
    pad = b"v" * 100
    started = time.monotonic()
    for i in range(records):
        key = key_of(rng.randrange(records) if updates else i)
        ts = sb.now_ms()
        value: bytes | None = (b"%d:" % i + pad)[:100]
        if updates:
            roll = rng.random()
            if roll < 0.01:
                value = None
            elif roll < 0.06:
                ts -= rng.randrange(1, 3_600_000)
        headers = [("source", b"bench"), ("seq", b"%d" % i)]
        while True:
            try:
                producer.produce(name, key=key, value=value, timestamp=ts, headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120):
        raise RuntimeError("input records not delivered")
    return time.monotonic() - started


def consume_ceiling(bootstrap: str, name: str) -> tuple[int, float]:
    """Drain ``name`` from the beginning to its end offsets: (records, seconds)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"c-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "isolation.level": "read_committed", "log_level": 3})
    try:
        parts = consumer.list_topics(name, timeout=30).topics[name].partitions
        consumer.assign([TopicPartition(name, p, 0) for p in parts])
        count, eof = 0, set()
        started = time.monotonic()
        while len(eof) < len(parts):
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is None:
                    count += 1
                elif msg.error().code() == EOF:
                    eof.add(msg.partition())
        return count, time.monotonic() - started
    finally:
        consumer.close()


def parquet_ceiling(spark, records: int, path: str) -> float:
    """Spark writing ``records`` rows shaped like the input (key, 100-byte value, ts, two
    headers) to Parquet, generated in the JVM: seconds."""
    from pyspark.sql import functions as F

    rows = spark.range(records).select(
        F.format_string("k%08d", "id").cast("binary").alias("key"),
        F.expr("cast(repeat('v', 100) as binary)").alias("value"),
        (F.unix_millis(F.current_timestamp()) + F.col("id")).alias("ts"),
        F.array(F.struct(F.lit("source").alias("key"), F.lit(b"bench").alias("value")),
                F.struct(F.lit("seq").alias("key"),
                         F.col("id").cast("string").cast("binary").alias("value"))
                ).alias("headers"))
    started = time.monotonic()
    rows.write.mode("overwrite").parquet(path)
    return time.monotonic() - started


# -- the systems --------------------------------------------------------------------------------

def _ticks(pid: int) -> int | None:
    """CPU clock ticks (user + system) a process has used, ``None`` once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime, stime


def _descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (its JVM, for ``ttl``)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
    out, todo = [], [pid]
    while todo:
        at = todo.pop()
        children = [c for c, p in parent.items() if p == at]
        out += children
        todo += children
    return out


#: A JVM's own threads by what they do, as HotSpot names them (``/proc``'s 15-character
#: ``comm``): its JIT compilers and its garbage collector (G1's, or the parallel GC's).
JVM_THREADS: dict[str, tuple[str, ...]] = {
    "JIT": ("C1 CompilerThre", "C2 CompilerThre"),
    "GC": ("GC Thread#", "G1 Conc#", "G1 Refine#", "G1 Main Marker", "G1 Service"),
}


def _jvm_thread_ticks(pid: int) -> dict[tuple[int, str], int]:
    """CPU clock ticks of a process's JIT and GC threads, by (thread id, ``JVM_THREADS``
    kind)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
        except OSError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        for kind, prefixes in JVM_THREADS.items():
            if name.startswith(prefixes):
                fields = raw.rsplit(")", 1)[1].split()
                out[int(tid), kind] = int(fields[11]) + int(fields[12])
    return out


class CpuSampler:
    """The machine's CPU use sampled while a run goes (``/proc``): how busy its cores were
    while the batches ran, and whose work it was (``ttl``'s Python process, its JVM, the
    broker, anything else), with the JVM's JIT compiler and GC threads apart
    (``jvm_group``). A run that keeps every core busy is bound by the CPU work per
    record, not by waiting; the split says where that work is."""

    def __init__(self, groups: dict[str, Callable[[], list[int]]],
                 interval_s: float = 0.25, jvm_group: str | None = None) -> None:
        # (time, busy machine ticks, all machine ticks, {group: its processes' ticks})
        self.samples: list[tuple[float, int, int, dict[str, int]]] = []
        self.groups = groups  # name -> the pids it holds now
        self.jvm_group = jvm_group
        self._seen: dict[str, dict[int, int]] = {name: {} for name in groups}
        self._threads: dict[tuple[int, int, str], int] = {}  # (pid, tid, kind) -> ticks
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def _machine() -> tuple[int, int]:
        with open("/proc/stat") as f:
            ticks = [int(x) for x in f.readline().split()[1:9]]  # user .. steal
        idle = ticks[3] + ticks[4]  # idle, iowait
        return sum(ticks) - idle, sum(ticks)

    def _group_ticks(self) -> dict[str, int]:
        out = {}
        for name, pids in self.groups.items():
            seen = self._seen[name]
            for pid in pids():
                used = _ticks(pid)
                if used is not None:
                    seen[pid] = used  # a process that exits keeps its last count
            out[name] = sum(seen.values())
        if self.jvm_group is not None:
            for pid in self._seen[self.jvm_group]:
                for (tid, kind), used in _jvm_thread_ticks(pid).items():
                    self._threads[pid, tid, kind] = used  # an ended thread keeps its count
            for kind in JVM_THREADS:
                out[f"{self.jvm_group}: {kind}"] = sum(
                    v for (_, _, k), v in self._threads.items() if k == kind)
        return out

    def seen(self, group: str) -> list[int]:
        """Every process the group held while sampled (ended ones included)."""
        return list(self._seen[group])

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), *self._machine(), self._group_ticks()))
            self._stop.wait(self._interval)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def window(self, start: float, end: float) -> dict[str, float] | None:
        """Between ``start`` and ``end`` (epoch seconds): ``busy_cores`` (the machine's
        average), ``seconds``, and each group's CPU-seconds (``other``: the rest)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or inside[-1][2] == inside[0][2]:
            return None
        (w0, b0, t0, g0), (w1, b1, t1, g1) = inside[0], inside[-1]
        cores = os.cpu_count() or 1
        hz = os.sysconf("SC_CLK_TCK")
        out = {"busy_cores": (b1 - b0) / (t1 - t0) * cores, "seconds": w1 - w0}
        for name in self.groups:
            out[name] = (g1[name] - g0[name]) / hz
        out["other"] = (b1 - b0) / hz - sum(out[name] for name in self.groups)
        for name in set(g1) - set(self.groups):  # parts of a group ("its JVM: GC")
            out[name] = (g1[name] - g0.get(name, 0)) / hz
        return out


class Run:
    """One system over one workload: records, batch durations (and each batch's records),
    wall time, extras."""

    def __init__(self, system: str, records: int, timings: list[tuple[int, float]],
                 wall: float, **extra) -> None:
        self.system, self.records, self.wall = system, records, wall
        self.sizes = [n for n, _ in timings]
        self.durations = [s for _, s in timings]
        self.extra = extra

    @property
    def rate(self) -> float:
        busy = sum(self.durations)
        return self.records / busy if busy else 0.0

    @property
    def warm_rate(self) -> float:
        """Records/s over the second half of the batches: the JVM warmed up. Each ``ttl
        run`` starts its own JVM, whose JIT compiler does more than a third of its CPU work
        over a run of ten batches, most of it in the first ones; a stream that runs for
        hours is past that."""
        half = len(self.durations) // 2
        busy = sum(self.durations[half:])
        return sum(self.sizes[half:]) / busy if busy else 0.0

    def line(self, workload: str) -> str:
        d = self.durations or [0.0]
        return (f"  {workload} {self.system:<28} {self.rate:>10,.0f} rec/s  batches "
                f"{len(self.durations):>3}  p50 {sb.pct(d, 0.5):6.2f} s  p99 "
                f"{sb.pct(d, 0.99):6.2f} s  wall {self.wall:7.1f} s  second half "
                f"{self.warm_rate:>8,.0f} rec/s")

    def per_batch(self) -> str:
        return "  per batch (s): " + ", ".join(f"{s:.2f}" for s in self.durations)


def run_ttl(conf_path: Path, records: int, label: str, broker_pid: int | None = None,
            jfr: Path | None = None) -> Run:
    """``ttl run --available-now`` as a user runs it; figures from its ``ttl.batch`` lines.
    With ``jfr``, its JVM records a Java Flight Recording there (``jvm_profile``)."""
    err_path = conf_path.parent / f"{label}.stderr"
    if jfr is not None:  # the bench profile has one [spark.settings] table
        text = conf_path.read_text()
        assert text.count("\n[spark.settings]\n") == 1, conf_path
        assert "spark.driver.extraJavaOptions" not in text, conf_path
        jfr.unlink(missing_ok=True)  # never summarize an earlier run's recording
        conf_path = conf_path.with_name(f"{conf_path.stem}-{label}-jfr.toml")
        conf_path.write_text(text.replace(
            "\n[spark.settings]\n", "\n[spark.settings]\n"
            f'"spark.driver.extraJavaOptions" = "{jvm_profile.jfr_option(jfr)}"\n'))
    cmd = [sb.TTL_BIN, "run", "--conf", str(conf_path), "--available-now"]
    started = time.monotonic()
    with err_path.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        groups = {"ttl's Python": lambda: [proc.pid], "its JVM": lambda: _descendants(proc.pid),
                  "the broker": lambda: [broker_pid] if broker_pid else []}
        with CpuSampler(groups, jvm_group="its JVM") as cpu:
            proc.wait(timeout=3600)
            jvms = cpu.seen("its JVM")
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"ttl run exited {proc.returncode}:\n{sb.tail(err_path)}")
    lines = [(t, b) for t, b in sb.batch_lines(err_path.read_text(errors="replace"))
             if b["records_in"]]
    batches = [b for _, b in lines]
    seen = sum(b["records_in"] for b in batches)
    if seen != records:
        raise RuntimeError(f"ttl read {seen:,} records, expected {records:,}: {err_path}")
    durations = [b["duration_s"] for b in batches]
    sizes = [b["records_in"] for b in batches]
    # A batch's publication overlaps the next batch (its ``duration_s`` leaves it out); the
    # last one overlaps nothing, so it counts: the run is done when the changelog has it.
    # (An older checkout's batch line, run through ``--ttl-bin``, may have no phases: its
    # batches published inside their own duration.)
    if batches and "publish_wait" in batches[-1].get("phases_s", {}):
        durations[-1] += batches[-1]["phases_s"].get("publish", 0.0)
    # From the first batch's line (its publication done) to the last one's: batches 1..N ran.
    def per_100k(first: int) -> dict[str, float] | None:
        """CPU from batch ``first``'s line to the last one's, per 100k records of the
        batches after ``first``."""
        window = cpu.window(lines[first][0], lines[-1][0])
        if window is not None:
            per = 100_000 / sum(b["records_in"] for b in batches[first + 1:])
            window.update({k: v * per for k, v in window.items()
                           if k not in ("busy_cores", "seconds")})
        return window

    cpu_window = per_100k(0) if len(lines) >= 2 else None  # batches 1..N: one will do
    # The second half of the batches alone: a fresh JVM still compiles (JIT) its code
    # through the first minutes, which a long-running stream pays once.
    cpu_warm = per_100k(len(lines) // 2) if len(lines) >= 6 else None
    if jfr is not None:  # the JVM writes its recording as it exits, after ttl's Python
        jvm_profile.wait_for_exit(jvms)  # (and the next run must not overlap it)
        if len(lines) > 1:
            print(jvm_profile.line(jvm_profile.summarize(jfr, lines[0][0], lines[-1][0])),
                  flush=True)
    return Run("ttl", records, list(zip(sizes, durations, strict=True)), wall,
               batches=batches, cpu=cpu_window, cpu_warm=cpu_warm)


def _progress_batches(query) -> list[tuple[int, float]]:
    """(records, seconds) of each batch that read records."""
    return [(p["numInputRows"], p["durationMs"]["triggerExecution"] / 1000)
            for p in query.recentProgress if p["numInputRows"]]


def _kafka_source(spark, bootstrap: str, name: str):
    return (spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", name)
            .option("startingOffsets", "earliest").option("includeHeaders", "true")
            .option("maxOffsetsPerTrigger", MAX_OFFSETS).load())


def run_baseline_a(spark, bootstrap: str, name: str, work: Path, records: int) -> Run:
    """A hand-written Delta upsert job: the MERGE a data engineer writes, no changelog."""
    from delta.tables import DeltaTable
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    path = str(work / "a-table")
    if not DeltaTable.isDeltaTable(spark, path):
        (spark.createDataFrame([], "key binary, value binary, ts bigint, "
                                   "headers array<struct<key:string,value:binary>>, "
                                   "expires_at bigint")
         .write.format("delta").save(path))
    last_sweep = [time.monotonic()]

    def batch(frame, batch_id: int) -> None:
        newest = Window.partitionBy("key").orderBy(F.col("ts").desc(), F.col("offset").desc())
        latest = (frame.withColumn("n", F.row_number().over(newest)).where("n = 1")
                  .withColumn("expires_at", F.col("ts") + F.lit(TTL_MS)))
        (DeltaTable.forPath(spark, path).alias("t")
         .merge(latest.alias("s"), "t.key = s.key")
         .whenMatchedDelete("s.value IS NULL AND s.ts >= t.ts")
         .whenMatchedUpdate("s.value IS NOT NULL AND s.ts >= t.ts", set={
             "value": "s.value", "ts": "s.ts", "headers": "s.headers",
             "expires_at": "s.expires_at"})
         .whenNotMatchedInsert("s.value IS NOT NULL", values={
             "key": "s.key", "value": "s.value", "ts": "s.ts", "headers": "s.headers",
             "expires_at": "s.expires_at"})
         .execute())
        if time.monotonic() - last_sweep[0] >= 10:
            DeltaTable.forPath(spark, path).delete(
                F.col("expires_at") <= F.unix_millis(F.current_timestamp()))
            last_sweep[0] = time.monotonic()

    rows = _kafka_source(spark, bootstrap, name).select(
        "key", "value", F.unix_millis("timestamp").alias("ts"), "headers", "offset")
    started = time.monotonic()
    query = (rows.writeStream.foreachBatch(batch)
             .option("checkpointLocation", str(work / "a-ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return Run("A: Delta MERGE job", records, _progress_batches(query),
               time.monotonic() - started)


def run_baseline_b(spark, bootstrap: str, name: str, work: Path, records: int,
                   out_topic: str) -> Run:
    """PySpark ``transformWithState`` with a TTL'd ValueState (RocksDB), Kafka in and out."""
    from pyspark.sql import Row
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor

    class Latest(StatefulProcessor):
        """Per key: the newest value by timestamp, kept for a day; every change is emitted."""

        def init(self, handle) -> None:
            self.entry = handle.getValueState("entry", "value binary, ts long",
                                              ttlDurationMs=TTL_MS)

        def handleInputRows(self, key, rows, timerValues):
            current = self.entry.get()  # one state read per key and batch
            for row in rows:
                if row.value is None:
                    if current is not None:
                        self.entry.clear()
                        current = None
                        yield Row(key=key[0], value=None)
                    continue
                if current is not None and current[1] > row.ts:
                    continue  # older than the stored entry: last writer on ts wins
                current = (row.value, row.ts)
                self.entry.update(current)
                yield Row(key=key[0], value=row.value)

        def close(self) -> None:
            pass

    spark.conf.set("spark.sql.streaming.stateStore.providerClass",
                   "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
    # A processing-time TTL makes every trigger "have work" (expiry), so an availableNow
    # query would run empty batches for ever; stop at the end of the input instead.
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
    rows = _kafka_source(spark, bootstrap, name).select(
        "key", "value", F.unix_millis("timestamp").alias("ts"))
    out = rows.groupBy("key").transformWithState(
        Latest(), "key binary, value binary", "Update", "ProcessingTime")
    started = time.monotonic()
    query = (out.writeStream.format("kafka")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", out_topic)
             .option("checkpointLocation", str(work / "b-ckpt"))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return Run("B: transformWithState+TTL", records, _progress_batches(query),
               time.monotonic() - started)


# -- the run --------------------------------------------------------------------------------------

def ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="per workload W1, W2")
    parser.add_argument("--trickle-seconds", type=float, default=60.0)
    parser.add_argument("--skip-a", action="store_true")
    parser.add_argument("--skip-b", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-restore", action="store_true")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--ttl-bin", metavar="PATH", default=sb.TTL_BIN,
                        help="the ttl command W1-W3 run (default: this venv's); e.g. a "
                             "wrapper that runs another checkout, for a before/after in one "
                             "sitting (W4's restore runs this checkout's code in-process)")
    parser.add_argument("--jfr", type=Path, metavar="DIR",
                        help="record ttl's JVM (Java Flight Recorder) into DIR and print where "
                             "its CPU goes (tests/bench/jvm_profile.py)")
    args = parser.parse_args()
    if args.jfr is not None and re.search(r"[\s,=\"]", str(args.jfr.resolve())):
        parser.error(f"--jfr: a directory without spaces, commas or quotes (it goes into a "
                     f"JVM option): {args.jfr.resolve()}")

    sb.TTL_BIN = args.ttl_bin
    from ttl.app import App
    from ttl.restore import restore
    from ttl.spark import get_session

    machine_facts()
    work = Path(tempfile.mkdtemp(prefix="ttl-compare-"))
    kafka = LocalKafka(work / "kafka", heap="1g").start()
    print(f"kafka up at {kafka.bootstrap_servers}; work dir {work}", flush=True)
    n = args.records
    results: dict[str, list[Run]] = {"W1": [], "W2": []}
    try:
        conf_path = sb.write_conf(work, kafka, trigger="1s", sweep_interval="10s",
                                  lease="30s", max_offsets=MAX_OFFSETS)
        conf = load(conf_path)
        name = conf.kafka.input_topic
        bootstrap = kafka.bootstrap_servers
        spark = get_session(overrides={"spark.sql.shuffle.partitions": "2"})
        b_out = f"b-out-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(b_out, 2, 1)])[b_out].result(timeout=60)
        for workload, updates in (("W1", False), ("W2", True)):
            seconds = produce(bootstrap, name, n, updates=updates, seed=args.seed)
            print(f"\n{workload}: produced {n:,} records in {seconds:.1f} s "
                  f"({n / seconds:,.0f} rec/s)", flush=True)
            jfr = None
            if args.jfr is not None:
                args.jfr.mkdir(parents=True, exist_ok=True)
                jfr = args.jfr.resolve() / f"{workload}.jfr"
            run = run_ttl(conf_path, n, workload, kafka.process.pid if kafka.process else None,
                          jfr)
            results[workload].append(run)
            print(run.line(workload), flush=True)
            print(run.per_batch(), flush=True)
            sb.print_phases(run.extra["batches"])
            cpu = run.extra["cpu"]
            if cpu is not None:
                per = {k: v for k, v in cpu.items()
                       if k not in ("busy_cores", "seconds") and ": " not in k}
                split = ", ".join(f"{k} {v:.1f}" for k, v in per.items())
                jvm = ", ".join(f"{k.split(': ')[1]} {v:.1f}" for k, v in cpu.items()
                                if k.startswith("its JVM: "))
                print(f"  machine CPU while the batches ran: {cpu['busy_cores']:.2f} of "
                      f"{os.cpu_count()} cores busy; CPU-s per 100k records: {split} "
                      f"(total {sum(per.values()):.1f}; of the JVM's, its threads' {jvm})",
                      flush=True)
            if not args.skip_a:
                results[workload].append(run_baseline_a(spark, bootstrap, name, work, n))
                print(results[workload][-1].line(workload), flush=True)
                print(results[workload][-1].per_batch(), flush=True)
            if not args.skip_b:
                results[workload].append(run_baseline_b(spark, bootstrap, name, work, n, b_out))
                print(results[workload][-1].line(workload), flush=True)
                print(results[workload][-1].per_batch(), flush=True)

        consumed, consume_s = consume_ceiling(bootstrap, name)
        consume_rate = consumed / consume_s
        parquet_rate = n / parquet_ceiling(spark, n, str(work / "parquet"))
        print(f"\nceilings: kafka consume {consume_rate:,.0f} rec/s ({consumed:,} records), "
              f"spark parquet write {parquet_rate:,.0f} rows/s", flush=True)

        restore_line = ""
        if not args.skip_restore:
            changelog, changelog_s = consume_ceiling(bootstrap, conf.kafka.changelog_topic)
            app = App(conf)
            result = restore(spark, conf, app.kafka, str(work / "restored"))
            restore_line = (
                f"  W4 restore {result.records_read:,} changelog records: "
                f"{result.rate:,.0f} rec/s = {ratio(result.rate, changelog / changelog_s)} "
                f"of draining the changelog ({changelog / changelog_s:,.0f} rec/s)")
            print(restore_line, flush=True)

        latency = None
        if not args.skip_latency:
            latency = sb.latency(work, kafka, argparse.Namespace(
                trigger="1s", sweep_interval="10s", lease="30s", trickle_rate=20.0,
                trickle_seconds=args.trickle_seconds, drain_timeout=60.0))

        print("\n== summary (one run, this machine) ==")
        for workload, runs in results.items():
            by = {r.system[0]: r for r in runs}
            for run in runs:
                print(run.line(workload))
            t = by.get("t")
            print(f"  {workload} ttl vs A {ratio(t.rate, by['A'].rate) if 'A' in by else 'n/a'}"
                  f", vs B {ratio(t.rate, by['B'].rate) if 'B' in by else 'n/a'}, "
                  f"{ratio(t.rate, consume_rate)} of kafka consume, "
                  f"{ratio(t.rate, parquet_rate)} of parquet write; ttl end to end "
                  f"(start-up included) {n / t.wall:,.0f} rec/s")
            print(f"  {workload} second half of the batches (JVMs warmed up): ttl vs A "
                  f"{ratio(t.warm_rate, by['A'].warm_rate) if 'A' in by else 'n/a'}, vs B "
                  f"{ratio(t.warm_rate, by['B'].warm_rate) if 'B' in by else 'n/a'}")
        print(f"  ceilings: kafka consume {consume_rate:,.0f} rec/s, "
              f"parquet write {parquet_rate:,.0f} rows/s")
        if restore_line:
            print(restore_line)
        if latency:
            print(f"  W3 latency produce -> changelog: p50 {latency['p50']:.2f} s, "
                  f"p99 {latency['p99']:.2f} s (trigger 1 s)")
    finally:
        kafka.stop()
        shutil.rmtree(work, ignore_errors=True)
        print(f"loadavg at end {os.getloadavg()[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
