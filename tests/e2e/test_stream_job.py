"""The streaming job as a user runs it (``ttl run`` in a subprocess) against the real broker.

The runs that only set a scenario up, or whose figures are what a test checks, run in this
process (``run_here``), sparing a Spark start each; whatever is about the command line
itself (exit codes, one-line errors, signals, a second process) runs as ``ttl``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.support import clients, consume_all, rebuild_from_changelog, wait_until
from ttl import commands
from ttl.app import App
from ttl.changelog import topic
from ttl.changelog.progress import read_progress
from ttl.config import load
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord

pytestmark = pytest.mark.e2e

TTL_BIN = str(Path(sys.executable).parent / "ttl")
DAY = 86_400_000


def write_profile(tmp_path: Path, bootstrap: str, *, ttl: str = "1d", clock: str = "wall",
                  extra: str = "", max_offsets: int = 100_000, kafka_extra: str = "",
                  interval: str = "1s", trigger: str = "1s", lease: str = "4s",
                  stream_extra: str = "") -> Path:
    """A profile for a test's own store against an external (already running) Kafka."""
    name = f"e2e{uuid.uuid4().hex[:8]}"
    conf = tmp_path / f"{name}.toml"
    conf.write_text(f"""
[store]
name = "{name}"
path = "{tmp_path / 'store'}"
ttl = "{ttl}"
[kafka]
bootstrap_servers = "{bootstrap}"
input_topic = "{name}-in"
changelog_topic = "{name}-cl"
changelog_partitions = 2
{kafka_extra}
[eviction]
clock = "{clock}"
interval = "{interval}"
lease = "{lease}"
[maintenance]
optimize_interval = "1d"
vacuum_interval = "1d"
[stream]
checkpoint = "{tmp_path / 'checkpoint'}"
trigger = "{trigger}"
max_offsets_per_trigger = {max_offsets}
{stream_extra}
[spark.settings]
"spark.sql.shuffle.partitions" = "2"
{extra}
""")
    return conf


def write_conf(tmp_path: Path, kafka, *, changelog_policy=None, **profile) -> Path:
    """A profile (``write_profile``'s settings) on the given broker, with its input and
    changelog topics created."""
    conf = write_profile(tmp_path, kafka.bootstrap_servers, **profile)
    loaded = load(conf)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(loaded.kafka.input_topic, 2, 1)])[
        loaded.kafka.input_topic].result()
    if changelog_policy is None:
        topic.create(clients(loaded, kafka), loaded.changelog)
    else:
        for t in (loaded.kafka.changelog_topic, topic.progress_topic(loaded.kafka.changelog_topic)):
            admin.create_topics([NewTopic(t, 2 if t.endswith("-cl") else 1, 1, config={
                "cleanup.policy": changelog_policy})])[t].result()
    return conf


def produce(kafka, conf_path: Path, records: list[InputRecord], *,
            flush_timeout: float = 30) -> None:
    conf = load(conf_path)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "partitioner": "murmur2_random"})
    for r in records:
        producer.produce(conf.kafka.input_topic, key=r.key, value=r.value,
                         headers=list(r.headers), partition=r.partition,
                         timestamp=r.timestamp if r.timestamp and r.timestamp > 0 else 0)
    assert producer.flush(flush_timeout) == 0


def ttl(*args: str, timeout: int = 300, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([TTL_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          **kw)


def run_here(conf_path: Path) -> str:
    """``ttl run --available-now`` in this process, on the suite's Spark session: what the
    command line prints. For the runs that set a scenario up or check its figures; the
    command line's own behaviour (exit codes, one-line errors, signals) is tested through
    ``ttl``, in a process of its own."""
    return commands.run(load(conf_path), available_now=True)


def table_rows(spark, path: str) -> dict[bytes, tuple]:
    return {bytes(r.key): (bytes(r.value), r.ts,
                           tuple((h.key, None if h.value is None else bytes(h.value))
                                 for h in r.headers))
            for r in spark.read.format("delta").load(path).collect()}


def crafted(now: int) -> list[InputRecord]:
    """Out-of-order, negative timestamps, duplicates, deletes, headers, invalid records."""
    h = (("h", b"1"), ("n", None), ("h", b"2"))
    rows = [
        (b"a", b"a1", now, h), (b"a", b"a0", now - 5_000, ()),            # out of order
        (b"b", b"b1", now, (("ttl.ts", b"-315619200000"), ("ttl.ttl", str(400 * 365 * DAY)
                                                           .encode()))),  # 1960
        (b"c", b"c1", now, ()), (b"c", b"c1", now, ()),                   # duplicate
        (b"d", b"d1", now, ()), (b"d", None, now, ()),                    # put then delete
        (None, b"x", now, ()),                                            # null key
        (b"e", b"e1", now, (("ttl.ttl", b"zero"),)),                      # bad engine header
        (b"f", b"f1", now, (("ttl.op", b"put"),)),                        # reserved header
        (b"g", None, now, ()),                                            # delete, absent
    ]
    return [InputRecord(k, v, ts, hd, 0, i) for i, (k, v, ts, hd) in enumerate(rows)]


def test_available_now_processes_crafted_input_into_table_dead_letters_and_changelog(
        spark, kafka, tmp_path):
    conf_path = write_conf(tmp_path, kafka)
    now = int(time.time() * 1000)
    records = crafted(now)
    produce(kafka, conf_path, records)
    proc = ttl("run", "--conf", str(conf_path), "--available-now")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "records=11" in proc.stdout and "rejected=3" in proc.stdout
    conf = load(conf_path)
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(records, now)
    rows = table_rows(spark, conf.store.path)
    assert set(rows) == set(model.entries) == {b"a", b"b", b"c"}
    assert rows[b"a"] == (b"a0", now, ())                     # max ts kept, latest value
    assert rows[b"b"][1] == -315_619_200_000
    dead = spark.read.format("delta").load(conf.store.dead_letters).collect()
    assert sorted(r.reason for r in dead) == ["bad_engine_header", "bad_engine_header",
                                              "null_key"]
    msgs = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 3)
    rebuilt = rebuild_from_changelog(msgs)
    assert {k: v for k, (v, _) in rebuilt.items()} == {k: v[0] for k, v in rows.items()}
    batch_lines = [json.loads(line.split("ttl.batch: ", 1)[1]) for line in
                   proc.stderr.splitlines() if "ttl.batch: " in line]
    assert batch_lines and batch_lines[-1]["catch_up"] == "11/11"


def test_kill_9_mid_run_then_restart_equals_the_model_and_applies_no_batch_twice(
        spark, kafka, tmp_path):
    conf_path = write_conf(tmp_path, kafka, max_offsets=150)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    keys = [f"k{i}".encode() for i in range(40)]
    records = []
    for i in range(1_500):
        key = keys[(i * 7) % 40]
        value = None if i % 11 == 0 else f"v{i}".encode()
        ts = now - (i % 13) * 100
        records.append(InputRecord(key, value, ts, (("i", str(i).encode()),),
                                   0 if key < b"k2" else 1, i))
    produce(kafka, conf_path, records)
    first = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path), "--available-now"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    log_dir = Path(conf.store.path) / "_delta_log"
    wait_until(lambda: len(list(log_dir.glob("*.json"))) >= 4 or first.poll() is not None,
               timeout=240, interval=0.05, what="a few committed batches")
    assert first.poll() is None, "the job finished before it could be killed"
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    run_here(conf_path)
    model = ReferenceStore(Semantics(ttl=DAY))
    ordered = sorted(records, key=lambda r: (r.partition, r.offset))
    model.apply_batch(ordered, now)
    expected = {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}
    rows = table_rows(spark, conf.store.path)
    assert rows == expected
    history = spark.sql(f"DESCRIBE HISTORY delta.`{conf.store.path}`").collect()
    batches = [json.loads(r.userMetadata) for r in history
               if r.userMetadata and '"op":"batch"' in r.userMetadata]
    applied = [(b["query_id"], b["batch_id"]) for b in batches]
    assert len(applied) == len(set(applied)), "a batch was applied twice"
    full = _consume_everything(kafka, conf.kafka.changelog_topic)
    assert {k: v for k, (v, _) in rebuild_from_changelog(full).items()} == \
        {k: v[0] for k, v in rows.items()}


def _consume_everything(kafka, name: str) -> list:
    """Every committed record of ``name``, read until each partition reports its end."""
    from confluent_kafka import Consumer

    msgs: list = []
    deadline = time.monotonic() + 60
    consumer = Consumer({"bootstrap.servers": kafka.bootstrap_servers,
                         "group.id": f"all-{uuid.uuid4().hex}", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed", "enable.partition.eof": True})
    consumer.subscribe([name])
    eof: set[int] = set()
    parts = None
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:
                    eof.add(msg.partition())
                    parts = parts or len(consumer.assignment())
                    if parts and len(eof) >= parts:
                        break
                continue
            msgs.append(msg)
    finally:
        consumer.close()
    assert parts and len(eof) >= parts, f"did not reach the end of {name}"
    return msgs


def test_sigterm_stops_cleanly_with_everything_published(spark, kafka, tmp_path):
    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    produce(kafka, conf_path, [InputRecord(f"k{i}".encode(), b"v", now, (), i % 2, i)
                               for i in range(200)])
    job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log_dir = Path(conf.store.path) / "_delta_log"
    wait_until(lambda: len(list(log_dir.glob("*.json"))) >= 3, timeout=180,
               what="the first batch commit")
    job.send_signal(signal.SIGTERM)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 0, err[-4000:]
    assert "stopped:" in err
    version = spark.sql(f"DESCRIBE HISTORY delta.`{conf.store.path}` LIMIT 1").first().version
    progress = read_progress(clients(conf, kafka), topic.progress_topic(conf.kafka.changelog_topic))
    assert progress.version == version  # the last version is fully published


def test_idle_input_keys_expire_with_tombstones_while_no_records_arrive(spark, kafka,
                                                                       tmp_path):
    conf_path = write_conf(tmp_path, kafka, ttl="30s")  # outlives a batch, even under load
    conf = load(conf_path)
    log_path = tmp_path / "job.log"
    log = log_path.open("w")
    job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                           stdout=log, stderr=subprocess.STDOUT)
    try:  # the records once the stream runs: their 30 s start after its start-up
        wait_until(lambda: " started in " in log_path.read_text() or job.poll() is not None,
                   timeout=180, interval=0.2, what="the stream's start")
        assert job.poll() is None, log_path.read_text()[-4000:]
        now = int(time.time() * 1000)
        produce(kafka, conf_path, [InputRecord(b"idle-a", b"v", now, (), 0, 0),
                                   InputRecord(b"idle-b", b"v", now, (), 1, 0)])
        msgs = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 4,
                           timeout=180)
    finally:
        job.send_signal(signal.SIGTERM)
        job.wait(timeout=120)
        log.close()
        print((tmp_path / "job.log").read_text()[-5000:])
    tombstones = {m.key(): dict(m.headers()) for m in msgs if m.value() is None}
    assert set(tombstones) == {b"idle-a", b"idle-b"}
    assert {h["ttl.op"] for h in tombstones.values()} == {b"expire"}


@pytest.mark.parametrize(("change", "message"), [
    ("[extra]\nx = 1", "extra"),
    ('[stream.x]\ny = 1', "stream.x"),
    ("max_offsets_per_trigger = 100000|max_offsets_per_trigger = \"lots\"",
     "stream.max_offsets_per_trigger"),
    ("", "kafka.input_topic"),
    ("", "cleanup.policy"),
    ('ttl = "1d"|ttl = "1d"\nmax_value_bytes = 1048576', "store.max_record_bytes (1000000)"),
    ("", "max.message.bytes is 500000"),
])
def test_bad_configuration_fails_at_start_naming_the_setting(kafka, tmp_path, change,
                                                             message):
    """Reliability 7 among them: size limits a changelog record cannot carry (the profile's
    own, or the changelog topic's max.message.bytes) are refused at start, naming them."""
    policy = "delete" if message == "cleanup.policy" else None
    conf_path = write_conf(tmp_path, kafka, changelog_policy=policy)
    if message.startswith("max.message.bytes"):
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

        name = load(conf_path).kafka.changelog_topic
        resource = ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[
            ConfigEntry("max.message.bytes", "500000",
                        incremental_operation=AlterConfigOpType.SET)])
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.incremental_alter_configs([resource])[resource].result(30)
    if "|" in change:  # a replacement: old|new
        old, new = change.split("|")
        conf_path.write_text(conf_path.read_text().replace(old, new))
    else:
        conf_path.write_text(conf_path.read_text() + "\n" + change + "\n")
    if message == "kafka.input_topic":
        text = conf_path.read_text().replace('input_topic = "', 'input_topic = "missing-')
        conf_path.write_text(text)
    proc = ttl("run", "--conf", str(conf_path), "--available-now", timeout=180)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert message in proc.stderr


def test_every_class_of_bad_input_is_dead_lettered_with_its_reason_and_the_job_goes_on(
        spark, kafka, tmp_path):
    """Reliability, bad input (README's table, one record per class) and scenario 7 as the
    issue tried it: a 1,000,001-byte value was wedging the job. Each bad record lands in the
    dead-letter table with its reason; the good ones between them are stored and published
    (a value at the limit too); the run ends well, and so does the next one (in this
    process: the exit code of a run is the other tests')."""
    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    bad = [  # (key, value, headers, kafka timestamp, reason)
        (None, b"v", [], now, "null_key"),
        (b"b1", b"v", [("ttl.ttl", b"zero")], now, "bad_engine_header"),
        # what Spark's Kafka source makes of a name's non-UTF-8 bytes (a Go or C producer
        # can send them; confluent-kafka's Python API sends names as text)
        (b"b2", b"v", [("n\ufffd\ufffd", b"v")], now, "bad_header_key"),
        (b"b3", b"v", [("ttl.ts", b"-9223372036854775808")], now, "missing_timestamp"),
        (b"b4", b"v", [("ttl.ts", str(now + 2 * DAY).encode())], now, "future_timestamp"),
        (b"b5", b"v" * 1_000_001, [], now, "value_too_large"),
        (b"b6", b"v", [("big", b"h" * 70_000)], now, "headers_too_large"),
        (b"k" * 999_600, b"v", [], now, "too_large_to_publish"),
    ]
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "message.max.bytes": 1_040_000, "compression.type": "lz4"})
    failed = []

    def send(key, value, headers, partition, ts) -> None:  # one record per batch: a big one
        producer.produce(conf.kafka.input_topic, key=key, value=value, headers=headers,
                         partition=partition, timestamp=ts,  # must not sink its neighbours
                         on_delivery=lambda err, _msg: err and failed.append(err))
        assert producer.flush(30) == 0

    for i, (key, value, headers, ts, _) in enumerate(bad):
        send(key, value, headers, 0, ts)
        send(b"good-%d" % i, b"g", [], 0, now)
    send(b"edge", b"e" * 921_600, [], 1, now)
    assert failed == []
    first = run_here(conf_path)
    assert f"records={2 * len(bad) + 1} " in first, first
    assert f"rejected={len(bad)} " in first, first
    dead = spark.read.format("delta").load(conf.store.dead_letters).collect()
    assert sorted(r.reason for r in dead) == sorted(reason for *_, reason in bad)
    assert all(r.detail for r in dead)
    good = {b"good-%d" % i for i in range(len(bad))} | {b"edge"}
    assert set(table_rows(spark, conf.store.path)) == good
    msgs = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, len(good),
                       timeout=60)
    assert {m.key() for m in msgs} == good
    assert {len(m.value()) for m in msgs if m.key() == b"edge"} == {921_600}
    produce(kafka, conf_path, [InputRecord(b"after", b"a", now, (), 1, 0)])
    assert "records=1 " in run_here(conf_path)


def test_input_gone_before_it_was_read_stops_naming_it_or_is_skipped_on_request(
        spark, kafka, tmp_path):
    """Reliability 14: input the store had not read is deleted from the topic (as retention
    does while the job is down). The run stops at once with one line naming the partition
    and the lost offsets (exit 2, not Spark's "Some data may have been lost" trace); with
    stream.on_lost_input = "skip" it goes on after them and the table's history records
    the skipped range."""
    from confluent_kafka import TopicPartition

    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    produce(kafka, conf_path, [InputRecord(b"a%d" % i, b"v", now, (), i % 2, i // 2)
                               for i in range(10)])
    run_here(conf_path)
    produce(kafka, conf_path, [InputRecord(b"b%d" % i, b"v", now, (), 0, 5 + i)
                               for i in range(6)])
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    gone = TopicPartition(conf.kafka.input_topic, 0, 8)               # b0, b1, b2 age out
    for future in admin.delete_records([gone]).values():
        future.result(30)
    stopped = ttl("run", "--conf", str(conf_path), "--available-now")
    assert stopped.returncode == 2, stopped.stderr[-4000:]
    assert "partition 0 offsets 5..7 (3 records) are gone" in stopped.stderr, \
        stopped.stderr[-4000:]
    assert "on_lost_input" in stopped.stderr
    conf_path.write_text(conf_path.read_text().replace(
        "[stream]\n", '[stream]\non_lost_input = "skip"\n'))
    skipped = run_here(conf_path)
    assert "records=3 " in skipped, skipped                          # b3, b4, b5
    keys = set(table_rows(spark, conf.store.path))
    assert keys == {b"a%d" % i for i in range(10)} | {b"b3", b"b4", b"b5"}
    audit = [json.loads(r.userMetadata)["lost_input"] for r in spark.sql(
        f"DESCRIBE HISTORY delta.`{conf.store.path}`").collect()
        if r.userMetadata and "input_skipped" in r.userMetadata]
    assert audit == [{"0": [5, 8]}]


def test_disaster_recovery_resumes_the_stream_right_after_the_restored_input(
        spark, kafka, tmp_path):
    """Table and checkpoint lost; `ttl restore` rebuilds the table from the changelog with
    the input offsets it had consumed; a new stream starts right after them: nothing lost
    (the new input arrives), nothing old re-applied (the job reads only the new records).

    Reliability scenarios 1 and 2: before the loss an OPTIMIZE and a last batch that read
    only partition 0 and changed nothing (a delete of an absent key: an empty commit) make
    the last published version newer than the last changelog record, and leave partition 1
    out of the last batch. The restore still records the whole input position."""
    import shutil

    from delta.tables import DeltaTable

    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    before = [InputRecord(f"k{i % 30}".encode(), None if i % 9 == 0 else f"a{i}".encode(),
                          now - i, (("i", str(i).encode()),), i % 2, i) for i in range(120)]
    produce(kafka, conf_path, before)
    run_here(conf_path)
    DeltaTable.forPath(spark, conf.store.path).optimize().executeCompaction()
    no_op = [InputRecord(b"absent", None, now, (), 0, 500)]
    produce(kafka, conf_path, no_op)
    noop_run = run_here(conf_path)
    assert "records=1 " in noop_run, noop_run
    shutil.rmtree(conf.store.path)                                  # the disaster
    shutil.rmtree(conf.stream.checkpoint)
    restored = commands.restore(App(conf, spark=spark))
    resumes = next(line for line in restored.splitlines() if "input resumes at" in line)
    assert "'0': 61" in resumes and "'1': 60" in resumes, restored
    after = [InputRecord(f"k{i % 45}".encode(), f"b{i}".encode(), now + i, (), i % 2, 200 + i)
             for i in range(60)]
    produce(kafka, conf_path, after)
    second = run_here(conf_path)
    assert f"records={len(after)} " in second, second                 # no old record again
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(sorted(before, key=lambda r: (r.partition, r.offset)), now)
    model.apply_batch(sorted(after, key=lambda r: (r.partition, r.offset)), now)
    expected = {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}
    assert table_rows(spark, conf.store.path) == expected            # nothing lost


def test_a_new_checkpoint_resumes_every_partition_not_only_the_last_batchs(
        spark, kafka, tmp_path):
    """Reliability scenario 1: the last batch read only partition 0; the checkpoint is lost;
    the new checkpoint resumes partition 1 where the table says it was, not at its earliest
    offset (re-reading it would put old values back over newer ones)."""
    import shutil

    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    produce(kafka, conf_path, [InputRecord(b"p1", b"old", now, (), 1, 0),
                               InputRecord(b"p0", b"v", now, (), 0, 0)])
    run_here(conf_path)
    produce(kafka, conf_path, [InputRecord(b"p1", None, now + 1, (), 0, 1)])  # a delete, p0
    run_here(conf_path)
    shutil.rmtree(conf.stream.checkpoint)                            # checkpoint lost
    produce(kafka, conf_path, [InputRecord(b"new", b"n", now, (), 0, 2)])
    third = run_here(conf_path)
    assert "records=1 " in third, third                              # p1's put not re-read
    assert set(table_rows(spark, conf.store.path)) == {b"p0", b"new"}


def test_a_regressed_checkpoint_is_refused_not_skipped_as_already_applied(
        spark, kafka, tmp_path):
    """Reliability scenario 9: the checkpoint is put back to an older copy (a backup). Its
    next batch id was already applied, so Delta's txn id would skip the batch as a replay,
    dropping the new record it also holds. The batch's start offsets are behind the
    position the table records: the run stops naming the partition and writes nothing."""
    import shutil

    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    produce(kafka, conf_path, [InputRecord(b"a", b"1", now, (), 0, 0)])
    run_here(conf_path)
    backup = tmp_path / "checkpoint-backup"
    shutil.copytree(conf.stream.checkpoint, backup)
    produce(kafka, conf_path, [InputRecord(b"b", b"1", now, (), 0, 1)])
    run_here(conf_path)
    shutil.rmtree(conf.stream.checkpoint)
    shutil.copytree(backup, conf.stream.checkpoint)                  # the checkpoint regresses
    produce(kafka, conf_path, [InputRecord(b"c", b"1", now, (), 0, 2)])
    third = ttl("run", "--conf", str(conf_path), "--available-now")
    assert third.returncode == 2, third.stderr[-4000:]
    assert "re-reads input" in third.stderr and "partition 0 from offset 1 (applied up to 2)" \
        in third.stderr and "move the checkpoint directory away" in third.stderr, \
        third.stderr[-4000:]
    assert set(table_rows(spark, conf.store.path)) == {b"a", b"b"}
    # The operator action (a new checkpoint resumes at the table's position) is
    # test_a_new_checkpoint_resumes_every_partition_not_only_the_last_batchs.


def test_schedule_daemon_sweeps_on_its_schedule_and_stops_on_sigterm(spark, kafka, tmp_path):
    """`ttl schedule` as the systemd unit runs it: wall-clock sweeps while no stream runs
    (expired entries leave, tombstones are published), then SIGTERM stops it with exit 0."""
    from ttl.store import DeltaStore

    conf_path = write_conf(tmp_path, kafka, ttl="30s")  # alive when written, even under load
    conf = load(conf_path)
    store = DeltaStore(spark, conf.store)
    now = int(time.time() * 1000)
    written = store.apply_records(
        [InputRecord(f"k{i}".encode(), b"v", now, (), 0, i) for i in range(5)])
    assert written.counts.upserted == 5
    daemon = subprocess.Popen([TTL_BIN, "schedule", "--conf", str(conf_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        swept = wait_until(lambda: spark.read.format("delta").load(conf.store.path).count() == 0
                           or daemon.poll() is not None, timeout=180, interval=1.0,
                           what="the daemon's sweep")
        msgs = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 10,
                           timeout=120) if daemon.poll() is None else []
    finally:
        daemon.send_signal(signal.SIGTERM)
        _, err = daemon.communicate(timeout=120)
    assert swept and daemon.returncode == 0, err[-4000:]
    assert "scheduler for" in err and "evicted 5 entries" in err, err[-4000:]
    assert sorted(m.key() for m in msgs if m.value() is None) == \
        [f"k{i}".encode() for i in range(5)], err[-4000:]


def test_a_second_run_or_the_scheduler_never_fences_the_live_stream(spark, kafka, tmp_path):
    """Reliability scenario 8: a second `ttl run` and a `ttl schedule` on the profile of a
    running stream take (or wait for) the lease before anything that writes; they refuse or
    skip, and the live stream keeps processing and publishing (its transactional producer is
    never fenced). The lease is the shipped default's 30 s: the e2e profile's 4 s is renewed
    by a MERGE every 1.3 s, which a loaded 2-core machine does not always keep up with."""
    conf_path = write_conf(tmp_path, kafka, lease="30s")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    first_half = [InputRecord(f"k{i}".encode(), b"v", now, (), i % 2, i // 2)
                  for i in range(20)]
    produce(kafka, conf_path, first_half)
    log_path = tmp_path / "first.stderr"
    with log_path.open("w") as log_file:
        first = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                                 stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    daemon_log = tmp_path / "daemon.stderr"
    try:
        log_dir = Path(conf.store.path) / "_delta_log"
        wait_until(lambda: len(list(log_dir.glob("*.json"))) >= 3 or first.poll() is not None,
                   timeout=180, what="the first stream's first batch")
        assert first.poll() is None, log_path.read_text()[-4000:]

        second = ttl("run", "--conf", str(conf_path), timeout=300)
        assert second.returncode == 2, second.stderr[-4000:]
        assert f"owned by stream:{conf.store.name}" in second.stderr, "\n".join(
            line for line in second.stderr.splitlines() if not line.startswith("\t"))[-6000:]

        with daemon_log.open("w") as daemon_file:
            daemon = subprocess.Popen([TTL_BIN, "schedule", "--conf", str(conf_path)],
                                      stdout=subprocess.DEVNULL, stderr=daemon_file)
        try:
            wait_until(lambda: "skipped: the stream owns the table" in daemon_log.read_text()
                       or daemon.poll() is not None, timeout=180, interval=0.5,
                       what="the scheduler skipping a run")
        finally:
            daemon.send_signal(signal.SIGTERM)
            daemon.wait(timeout=120)
        assert daemon.returncode == 0, daemon_log.read_text()[-4000:]

        produce(kafka, conf_path, [InputRecord(f"k{i}".encode(), b"w", now, (), i % 2, 10 + i)
                                   for i in range(20, 40)])
        msgs = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 40,
                           timeout=180)
        assert {m.key() for m in msgs} >= {f"k{i}".encode() for i in range(40)}
        assert first.poll() is None, log_path.read_text()[-4000:]
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)
    text = log_path.read_text()
    assert first.returncode == 0, text[-4000:]
    assert "Fenced" not in text and "lease on" not in text, text[-4000:]


def test_auto_batches_take_the_byte_budget_in_records_of_the_inputs_size(spark, kafka,
                                                                         tmp_path):
    """``max_offsets_per_trigger = "auto"``: a batch takes ``stream.batch_bytes``, in
    records of the size the input's newest records have at start plus the overhead the
    bound counts per record (200 + 256 B here: 2,000 records of 912,000 bytes), so 5,000
    records are three or four batches, none larger."""
    from ttl.batch_size import RECORD_OVERHEAD_BYTES

    conf_path = write_conf(tmp_path, kafka, max_offsets='"auto"',
                           stream_extra=f"batch_bytes = {2_000 * (200 + RECORD_OVERHEAD_BYTES)}")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    produce(kafka, conf_path, [InputRecord(b"k%07d" % i, b"v" * 192, now, (), i % 2, i // 2)
                               for i in range(5_000)])
    assert "records=5000 " in run_here(conf_path)
    history = spark.sql(f"DESCRIBE HISTORY delta.`{conf.store.path}`").collect()
    positions = sorted((r.version, json.loads(r.userMetadata)["input_offsets"])
                       for r in history if r.userMetadata and '"op":"batch"' in r.userMetadata)
    read = [sum(p.values()) for _, p in positions]
    sizes = [b - a for a, b in zip([0, *read], read, strict=False)]
    assert sum(sizes) == 5_000 and 3 <= len(sizes) <= 4 and max(sizes) <= 2_000, sizes
