"""Benchmark: the streaming job end to end, Kafka in to changelog out (prints figures).

    .venv/bin/python -m tests.bench.stream_bench                      # 1,000,000 keys
    .venv/bin/python -m tests.bench.stream_bench --keys 200000        # quick run
    .venv/bin/python -m tests.bench.stream_bench --skip-ingest --trickle-seconds 30

Starts a local Kafka broker (``LocalKafka``) and runs ``ttl run`` as a user does, in a
subprocess, against configuration files written like the e2e tests' ``write_conf`` (real
broker, input topic of 2 partitions, changelog topics made by ``topic.create``,
``max_offsets_per_trigger = 100000``, ``ttl = "1d"``, shuffle partitions 2).

1. **Sustained ingest**: produce ``--records`` records (default ``--keys``; keys ``k<i>`` for
   ``i % keys``, ~50-byte values, Kafka timestamp = now) as fast as confluent_kafka goes,
   then ``ttl run --conf FILE --available-now`` (stderr to a file). Prints the wall time and
   records/s of the job, its phases (start-up, batches, shutdown) read from the log lines,
   p50/p99 of the ``ttl.batch`` ``duration_s``, the changelog record count (consumed with
   ``read_committed``; compared with the sum of high watermarks, which also counts
   transaction markers) and the time from the first input record produced to the last
   changelog record (its ``LogAppendTime``).
2. **Latency under a trickle**: on a fresh store, ``ttl run --conf FILE`` (processingTime
   trigger ``--trigger``) in the background; once its query has started and one warm-up
   record made it through, produce ``--trickle-rate`` records/s for ``--trickle-seconds``
   with a ``bench.sent_ms`` header, consume the changelog (``read_committed``) concurrently,
   and print per-key latency (received - sent) p50/p99/max, plus the part up to the
   changelog record's broker append time. The job is stopped with SIGTERM at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.bench.machine import machine_facts
from tests.e2e.test_stream_job import write_conf as e2e_write_conf
from tests.support import wait_until
from ttl.config import load
from ttl.local.kafka import LocalKafka

TTL_BIN = str(Path(sys.executable).parent / "ttl")
SENT = "bench.sent_ms"
EOF = -191  # KafkaError._PARTITION_EOF


# -- helpers ----------------------------------------------------------------------------------

def other_jvms() -> int:
    """JVMs not started by this process tree (another benchmark or test run sharing cores)."""
    mine = {os.getpid()}
    count = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if cmd and cmd[0].endswith(b"java") and ppid not in mine:
            count += 1
    return count


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def write_conf(work: Path, kafka: LocalKafka, *, trigger: str, sweep_interval: str,
               lease: str, max_offsets: int = 100_000, ttl: str = "1d", **profile) -> Path:
    """The e2e tests' profile and topics, in a directory of its own (``profile``: more of
    ``write_profile``'s settings)."""
    base = work / f"bench{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True)
    return e2e_write_conf(base, kafka, ttl=ttl, max_offsets=max_offsets, trigger=trigger,
                          interval=sweep_interval, lease=lease, **profile)


def log_time(line: str) -> float | None:
    """Epoch seconds of a ``ttl`` log line (``%(asctime)s`` is local time, ms precision)."""
    try:
        return dt.datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def batch_lines(log_text: str) -> list[tuple[float | None, dict]]:
    out = []
    for line in log_text.splitlines():
        if "ttl.batch: " in line:
            out.append((log_time(line), json.loads(line.split("ttl.batch: ", 1)[1])))
    return out


def first_line_time(log_text: str, marker: str) -> float | None:
    for line in log_text.splitlines():
        if marker in line:
            return log_time(line)
    return None


def publish_seconds(log_text: str, since: float | None = None) -> list[float]:
    """Seconds of each publication that published something (publisher log lines)."""
    out = []
    for line in log_text.splitlines():
        if "ttl.changelog.publisher: published versions" not in line:
            continue
        when = log_time(line)
        if since is not None and when is not None and when < since:
            continue
        try:
            out.append(float(line.rsplit(" in ", 1)[1].split(" s", 1)[0]))
        except ValueError:
            pass
    return out


def print_publications_sweeps_summary(log_text: str, out_path: Path,
                                      since: float | None = None) -> None:
    """The closing lines of a run: publications and sweeps (those after ``since`` only, if
    given) and the job's own summary line."""
    scope = "" if since is None else " while measuring"
    pub = publish_seconds(log_text, since)
    if pub:
        print(f"  publications{scope}: {len(pub)}, seconds p50 {pct(pub, 0.5):.1f} "
              f"max {max(pub):.1f} (inside the batch durations)")
    print(f"  {scope.strip() + ': ' if scope else ''}{sweep_stats(log_text, since)}")
    summary = out_path.read_text().strip()
    if summary:
        print(f"  job summary: {summary}", flush=True)


def sweep_stats(log_text: str, since: float | None = None) -> str:
    """Wall sweeps the job logged (count, seconds), and runs APScheduler skipped."""
    took, skipped = [], 0
    for line in log_text.splitlines():
        when = log_time(line)
        if since is not None and when is not None and when < since:
            continue
        if "ttl.eviction: wall sweep at" in line and " in " in line:
            try:
                took.append(float(line.rsplit(" in ", 1)[1].split(" s", 1)[0]))
            except ValueError:
                pass
        elif "wall-clock sweep" in line and "skipped" in line:
            skipped += 1
    if not took:
        return f"wall sweeps: none logged, {skipped} skipped runs"
    return (f"wall sweeps: {len(took)} taking {sum(took):.1f} s in all (max {max(took):.1f} s, "
            f"held under the batch lock), {skipped} scheduled runs skipped")


def high_watermarks(bootstrap: str, name: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"hw-{uuid.uuid4().hex}",
                         "log_level": 3})
    try:
        parts = consumer.list_topics(name, timeout=30).topics[name].partitions
        return sum(consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1]
                   for p in parts)
    finally:
        consumer.close()


def consume_changelog(bootstrap: str, name: str, timeout: float = 300.0) -> dict:
    """Read every committed record of ``name`` to each partition's end."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"cl-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "log_level": 3})
    parts = consumer.list_topics(name, timeout=30).topics[name].partitions
    consumer.assign([TopicPartition(name, p, 0) for p in parts])
    figures = {"records": 0, "puts": 0, "tombstones": 0, "first_append_ms": None,
               "last_append_ms": None}
    keys: set[bytes] = set()
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        while len(eof) < len(parts) and time.monotonic() < deadline:
            for msg in consumer.consume(10_000, 1.0):
                if msg.error() is not None:
                    if msg.error().code() == EOF:
                        eof.add(msg.partition())
                    continue
                eof.discard(msg.partition())
                figures["records"] += 1
                if msg.value() is None:
                    figures["tombstones"] += 1
                else:
                    figures["puts"] += 1
                keys.add(msg.key())
                ts = msg.timestamp()[1]
                if figures["first_append_ms"] is None or ts < figures["first_append_ms"]:
                    figures["first_append_ms"] = ts
                if figures["last_append_ms"] is None or ts > figures["last_append_ms"]:
                    figures["last_append_ms"] = ts
    finally:
        consumer.close()
    figures["distinct_keys"] = len(keys)
    figures["complete"] = len(eof) >= len(parts)
    return figures


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


# -- 1. sustained ingest ------------------------------------------------------------------------

def produce_bulk(bootstrap: str, name: str, records: int, keys: int) -> tuple[int, float]:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random",
                         "linger.ms": 50, "batch.size": 1_000_000, "compression.type": "lz4",
                         "queue.buffering.max.messages": 1_000_000,
                         "queue.buffering.max.kbytes": 1_048_576, "log_level": 3})
    pad = b"." * 50
    first = now_ms()
    started = time.monotonic()
    for i in range(records):
        key = b"k%d" % (i % keys)
        value = (b"value-%d-" % i + pad)[:50]
        while True:
            try:
                producer.produce(name, key=key, value=value, timestamp=now_ms())
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    left = producer.flush(120)
    if left:
        raise RuntimeError(f"{left} input records not delivered")
    return first, time.monotonic() - started


def ingest(work: Path, kafka: LocalKafka, args) -> None:
    records = args.records or args.keys
    conf_path = write_conf(work, kafka, trigger=args.trigger,
                           sweep_interval=args.sweep_interval, lease=args.lease)
    conf = load(conf_path)
    print(f"\n[1] sustained ingest: {records:,} records over {args.keys:,} keys, "
          f"max_offsets_per_trigger 100,000, conf {conf_path}", flush=True)
    first_ms, produce_s = produce_bulk(kafka.bootstrap_servers, conf.kafka.input_topic,
                                       records, args.keys)
    print(f"  produced {records:,} records in {produce_s:.1f} s "
          f"({records / produce_s:,.0f} records/s)", flush=True)

    err_path = conf_path.parent / "run.stderr"
    out_path = conf_path.parent / "run.stdout"
    cmd = [TTL_BIN, "run", "--conf", str(conf_path), "--available-now"]
    print(f"  $ {' '.join(cmd)} 2>{err_path}", flush=True)
    spawned = time.time()
    started = time.monotonic()
    with err_path.open("w") as err, out_path.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=err, cwd=str(Path.cwd()),
                              timeout=args.run_timeout)
    wall = time.monotonic() - started
    exited = time.time()
    if proc.returncode != 0:
        print(f"  ttl run exited {proc.returncode}; stderr tail:\n{tail(err_path)}")
    log_text = err_path.read_text(errors="replace")
    batches = batch_lines(log_text)
    durations = [b["duration_s"] for _, b in batches]
    query_up = first_line_time(log_text, "; query ")
    print(f"  ttl run --available-now: exit {proc.returncode}, wall {wall:.1f} s, "
          f"{records / wall:,.0f} records/s end to end (including JVM/Spark start-up)")
    if batches:
        in_total = sum(b["records_in"] for _, b in batches)
        first_start = batches[0][0] - batches[0][1]["duration_s"] if batches[0][0] else None
        last_end = batches[-1][0]
        print(f"  batches: {len(batches)}, records_in total {in_total:,}, duration_s "
              f"p50 {pct(durations, 0.5):.2f} p99 {pct(durations, 0.99):.2f} "
              f"max {max(durations):.2f} min {min(durations):.2f}; "
              f"catch_up {batches[-1][1].get('catch_up')}")
        print("  per batch: " + ", ".join(
            f"#{b['batch']} {b['records_in']:,} in {b['duration_s']:.1f}s "
            f"({b['changelog_records']:,} cl)" for _, b in batches))
        print_phases([b for _, b in batches])
        if first_start and last_end and query_up:
            busy = last_end - first_start
            print(f"  phases: start-up to query started {query_up - spawned:.1f} s, "
                  f"first batch start to last batch end {busy:.1f} s "
                  f"({in_total / busy:,.0f} records/s in steady state), "
                  f"sum of batch durations {sum(durations):.1f} s, "
                  f"last batch end to exit {exited - last_end:.1f} s")
    else:
        print("  no ttl.batch lines in the job's stderr")
    print_publications_sweeps_summary(log_text, out_path)

    counted_at = time.monotonic()
    cl = consume_changelog(kafka.bootstrap_servers, conf.kafka.changelog_topic)
    hw = high_watermarks(kafka.bootstrap_servers, conf.kafka.changelog_topic)
    print(f"  changelog: {cl['records']:,} committed records ({cl['puts']:,} puts, "
          f"{cl['tombstones']:,} tombstones, {cl['distinct_keys']:,} distinct keys; "
          f"read to end: {cl['complete']}) in {time.monotonic() - counted_at:.1f} s; "
          f"sum of high watermarks {hw:,} (includes transaction markers)")
    if cl["distinct_keys"] != min(records, args.keys):
        print(f"  !! expected {min(records, args.keys):,} distinct keys on the changelog")
    if cl["last_append_ms"] is not None:
        span = (cl["last_append_ms"] - first_ms) / 1000
        print(f"  first input record produced -> last changelog record appended: "
              f"{span:.1f} s ({records / span:,.0f} records/s); first changelog record "
              f"appended {(cl['first_append_ms'] - first_ms) / 1000:.1f} s after the first "
              f"input record", flush=True)


def print_phases(batches: list[dict], q: float = 0.5) -> None:
    """Per-phase seconds (the ``q`` quantile over the batches, each phase on its own), Spark
    jobs per batch and the write's Delta metrics of the median batch, from the ``ttl.batch``
    lines that carry them. With ``q`` other than 0.5 only the phases are printed."""
    rows = [b["phases_s"] for b in batches if b.get("phases_s")]
    if not rows:
        return
    names = sorted({k for r in rows for k in r}, key=lambda k: (k == "total", k))
    print(f"  phase p{round(q * 100)} s: " + ", ".join(
        f"{n} {pct([r.get(n, 0.0) for r in rows], q):.2f}" for n in names))
    if q != 0.5:
        return
    jobs = [b["spark_jobs"] for b in batches if b.get("spark_jobs") is not None]
    if jobs:
        compiled = [b.get("codegen_compiles") or 0 for b in batches]
        print(f"  spark jobs per batch: p50 {pct(jobs, 0.5):.0f}, max {max(jobs)}; classes "
              f"compiled by code generation per batch: p50 {pct(compiled, 0.5):.0f}, "
              f"max {max(compiled)}")
    written = sorted((b for b in batches if b.get("write_metrics")),
                     key=lambda b: b["duration_s"])
    if written:
        print(f"  write metrics (median batch): {written[len(written) // 2]['write_metrics']}")


# -- 2. latency under a trickle -----------------------------------------------------------------

class ChangelogReader(threading.Thread):
    """Consumes the changelog (read_committed) and records when each key arrived."""

    def __init__(self, bootstrap: str, name: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap,
                                  "group.id": f"lat-{uuid.uuid4().hex}",
                                  "auto.offset.reset": "earliest",
                                  "enable.auto.commit": False,
                                  "isolation.level": "read_committed",
                                  "fetch.wait.max.ms": 10, "log_level": 3})
        parts = self.consumer.list_topics(name, timeout=30).topics[name].partitions
        self.consumer.assign([TopicPartition(name, p, 0) for p in parts])
        self.arrivals: dict[bytes, tuple[int, int, int | None]] = {}
        self.stop = threading.Event()
        self.lock = threading.Lock()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is None or msg.error() is not None:
                    continue
                received = now_ms()
                headers = dict(msg.headers() or ())
                sent = headers.get(SENT)
                with self.lock:
                    self.arrivals.setdefault(msg.key(), (
                        received, msg.timestamp()[1], int(sent) if sent else None))
        finally:
            self.consumer.close()

    def has(self, key: bytes) -> bool:
        with self.lock:
            return key in self.arrivals


def wait_for(check, timeout: float, what: str, proc: subprocess.Popen, err_path: Path) -> None:
    """``wait_until``, failing at once (with the job's log) if ``ttl run`` exits meanwhile."""
    def ready() -> bool:
        if proc.poll() is not None:
            raise RuntimeError(f"ttl run exited {proc.returncode} while waiting for {what}:\n"
                               f"{tail(err_path)}")
        return check()

    try:
        wait_until(ready, timeout=timeout, what=what)
    except AssertionError as exc:
        raise RuntimeError(f"{exc}:\n{tail(err_path)}") from None


def latency(work: Path, kafka: LocalKafka, args) -> dict | None:
    """Prints the trickle's figures; returns latency p50/p99 (s) send -> changelog received."""
    conf_path = write_conf(work, kafka, trigger=args.trigger,
                           sweep_interval=args.sweep_interval, lease=args.lease)
    conf = load(conf_path)
    print(f"\n[2] latency: trigger {args.trigger}, {args.trickle_rate:g} records/s for "
          f"{args.trickle_seconds:g} s, wall sweeps every {args.sweep_interval}, "
          f"conf {conf_path}", flush=True)
    err_path = conf_path.parent / "run.stderr"
    out_path = conf_path.parent / "run.stdout"
    cmd = [TTL_BIN, "run", "--conf", str(conf_path)]
    print(f"  $ {' '.join(cmd)} 2>{err_path} &", flush=True)
    reader = ChangelogReader(kafka.bootstrap_servers, conf.kafka.changelog_topic)
    reader.start()
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "partitioner": "murmur2_random", "linger.ms": 0, "log_level": 3})

    def send(key: bytes) -> int:
        sent = now_ms()
        producer.produce(conf.kafka.input_topic, key=key, value=b"x" * 50, timestamp=sent,
                         headers=[(SENT, str(sent).encode())])
        producer.poll(0)
        return sent

    spawned = time.monotonic()
    err = err_path.open("w")
    out = out_path.open("w")
    proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=str(Path.cwd()),
                            start_new_session=True)
    try:
        wait_for(lambda: "; query " in err_path.read_text(errors="replace"), 300,
                 "the query to start", proc, err_path)
        up = time.monotonic() - spawned
        warm = time.monotonic()
        send(b"warmup")
        producer.flush(10)
        wait_for(lambda: reader.has(b"warmup"), 300, "the warm-up record on the changelog",
                 proc, err_path)
        wait_for(lambda: "ttl.batch: " in err_path.read_text(errors="replace"), 60,
                 "the warm-up batch's log line", proc, err_path)
        print(f"  job up (query started) {up:.1f} s after spawn; warm-up record through in "
              f"{time.monotonic() - warm:.1f} s", flush=True)

        measure_from = time.time()
        sent: dict[bytes, int] = {}
        total = int(args.trickle_rate * args.trickle_seconds)
        period = 1.0 / args.trickle_rate
        start = time.monotonic()
        for i in range(total):
            target = start + i * period
            delay = target - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            key = b"lat%d" % i
            sent[key] = send(key)
        producer.flush(10)
        print(f"  produced {total} records in {time.monotonic() - start:.1f} s", flush=True)
        drain = time.monotonic() + args.drain_timeout
        while time.monotonic() < drain and not all(reader.has(k) for k in sent):
            if proc.poll() is not None:
                print(f"  !! ttl run exited {proc.returncode} mid-run:\n{tail(err_path)}")
                break
            time.sleep(0.2)
    finally:
        stop_started = time.monotonic()
        sigterm_ms = now_ms()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = proc.wait()
            print("  !! ttl run did not stop within 180 s of SIGTERM; killed")
        stop_s = time.monotonic() - stop_started
        err.close()
        out.close()
        reader.stop.set()
        reader.join(timeout=10)

    log_text = err_path.read_text(errors="replace")
    print(f"  SIGTERM -> exit {code} in {stop_s:.1f} s; clean stop line: "
          f"{'stopped:' in log_text}")
    if code != 0:
        print(f"  stderr tail:\n{tail(err_path)}")
    with reader.lock:
        arrivals = dict(reader.arrivals)
    lat, append, header_mismatch, after_stop = [], [], 0, 0
    for key, sent_ms in sent.items():
        if key not in arrivals:
            continue
        received, appended, header_sent = arrivals[key]
        if header_sent != sent_ms:
            header_mismatch += 1
        if appended >= sigterm_ms:
            after_stop += 1
        lat.append((received - (header_sent or sent_ms)) / 1000)
        append.append((appended - (header_sent or sent_ms)) / 1000)
    missing = len(sent) - len(lat)
    print(f"  records: {len(sent)} sent, {len(lat)} seen on the changelog, {missing} missing "
          f"after {args.drain_timeout:g} s drain ({after_stop} of those seen were published only "
          f"after SIGTERM, by the job's final publication); header mismatches "
          f"{header_mismatch}")
    if lat:
        print(f"  latency send -> changelog received (s): p50 {pct(lat, 0.5):.2f} "
              f"p99 {pct(lat, 0.99):.2f} max {max(lat):.2f} min {min(lat):.2f}")
        print(f"  latency send -> changelog appended (LogAppendTime, s): "
              f"p50 {pct(append, 0.5):.2f} p99 {pct(append, 0.99):.2f} max {max(append):.2f}")
    batches = [b for t, b in batch_lines(log_text) if t is None or t >= measure_from]
    if batches:
        durations = [b["duration_s"] for b in batches]
        sizes = [b["records_in"] for b in batches]
        print(f"  batches while measuring: {len(batches)}, records_in p50 "
              f"{pct(sizes, 0.5):.0f} max {max(sizes)}, duration_s p50 "
              f"{pct(durations, 0.5):.2f} p99 {pct(durations, 0.99):.2f} "
              f"max {max(durations):.2f}")
        print_phases(batches)
        print_phases(batches, 0.99)
    else:
        print("  no ttl.batch line logged while measuring")
    print_publications_sweeps_summary(log_text, out_path, measure_from)
    return {"p50": pct(lat, 0.5), "p99": pct(lat, 0.99)} if lat else None


# -- main -----------------------------------------------------------------------------------------

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--records", type=int, default=None, help="Default: --keys.")
    parser.add_argument("--trigger", default="1s", help="Processing-time trigger (part 2).")
    parser.add_argument("--sweep-interval", default="10s", help="eviction.interval")
    parser.add_argument("--lease", default="30s", help="eviction.lease")
    parser.add_argument("--trickle-rate", type=float, default=20.0)
    parser.add_argument("--trickle-seconds", type=float, default=60.0)
    parser.add_argument("--drain-timeout", type=float, default=60.0,
                        help="Wait this long after the trickle for the last records.")
    parser.add_argument("--run-timeout", type=float, default=1800.0)
    parser.add_argument("--skip-ingest", action="store_true")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--keep", action="store_true", help="Keep the work directory.")
    args = parser.parse_args()

    machine_facts()
    others = other_jvms()
    if others:
        print(f"note: {others} other JVM(s) running on this machine (shared cores)")
    work = Path(tempfile.mkdtemp(prefix="ttl-stream-bench-"))
    started = time.monotonic()
    kafka = LocalKafka(work / "kafka", heap="1g").start()
    print(f"kafka broker up at {kafka.bootstrap_servers} in {kafka.startup_seconds:.1f} s; "
          f"work dir {work}", flush=True)
    try:
        if not args.skip_ingest:
            ingest(work, kafka, args)
        if not args.skip_latency:
            latency(work, kafka, args)
    finally:
        kafka.stop()
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
        print(f"\nbench total {time.monotonic() - started:.0f} s; loadavg now "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)


if __name__ == "__main__":
    main()
