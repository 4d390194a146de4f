"""The streaming job against a three-broker Kafka cluster (one broker killed mid-run) and
against a SASL/PLAIN listener, as a user runs it (``ttl run``/``ttl drill`` subprocesses)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_stream_job import DAY, TTL_BIN, table_rows, write_profile
from tests.support import wait_until
from ttl.config import REPO_ROOT, load
from ttl.local.kafka import LocalKafka
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

SASL_USER = "ttl-job"
# Distinctive, so finding it anywhere in output or logs is a real leak, not a coincidence.
SASL_PASSWORD = f"pw-{secrets.token_hex(8)}-NeverLogMe"
SASL_ENV = {"TTL_TEST_KAFKA_PROTOCOL": "SASL_PLAINTEXT", "TTL_TEST_KAFKA_USER": SASL_USER,
            "TTL_TEST_KAFKA_PASSWORD": SASL_PASSWORD}


# -- helpers ---------------------------------------------------------------------------------

def cluster_profile(tmp_path: Path, bootstrap: str, *, replication: int = 1,
                    sasl: bool = False, max_offsets: int = 100_000) -> Path:
    """A profile for an external (non-embedded) Kafka; SASL settings name env vars only."""
    security = """
security_protocol_env = "TTL_TEST_KAFKA_PROTOCOL"
sasl_mechanism = "PLAIN"
sasl_username_env = "TTL_TEST_KAFKA_USER"
sasl_password_env = "TTL_TEST_KAFKA_PASSWORD"
""" if sasl else ""
    return write_profile(tmp_path, bootstrap, max_offsets=max_offsets, interval="30s",
                         kafka_extra=f"input_partitions = 2\nreplication_factor = "
                                     f"{replication}\n{security}")


def ttl(*args: str, env: dict | None = None, timeout: float = 300,
        cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([TTL_BIN, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, cwd=cwd)


def create_topics(client: dict, conf_path: Path, env: dict | None = None,
                  cwd: Path | None = None) -> None:
    """The input topic (the job never creates it on an external cluster), then the changelog
    topics the way an operator does: ``ttl topic create`` (at kafka.replication_factor)."""
    conf = load(conf_path)
    admin = AdminClient(client)
    admin.create_topics([NewTopic(conf.kafka.input_topic, conf.kafka.input_partitions,
                                  conf.kafka.replication_factor)])[
        conf.kafka.input_topic].result(timeout=60)
    made = ttl("topic", "create", "--conf", str(conf_path), env=env, cwd=cwd, timeout=120)
    assert made.returncode == 0, made.stderr[-3000:]


def records(count: int, start: int, now: int) -> list[InputRecord]:
    """Puts and deletes over 40 keys; a key always goes to the same partition (so the
    model's (partition, offset) order is the order the job sees per key)."""
    out = []
    for i in range(start, start + count):
        key = f"k{(i * 7) % 40}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode()
        out.append(InputRecord(key, value, now - (i % 13) * 100, (("i", str(i).encode()),),
                               int(key[1:]) % 2, i))
    return out


def produce(producer: Producer, topic: str, batch: list[InputRecord]) -> None:
    for r in batch:
        producer.produce(topic, key=r.key, value=r.value, headers=list(r.headers),
                         partition=r.partition, timestamp=r.timestamp)
    assert producer.flush(120) == 0, "records left unacknowledged"


def expected_table(batch: list[InputRecord], now: int) -> dict[bytes, tuple]:
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(sorted(batch, key=lambda r: (r.partition, r.offset)), now)
    return {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}


def batch_lines(log: Path) -> list[dict]:
    return [json.loads(line.split("ttl.batch: ", 1)[1]) for line in
            log.read_text(errors="replace").splitlines() if "ttl.batch: " in line]


def consumed_offsets(log: Path) -> dict[str, int]:
    """Per input partition, the highest next-offset any committed batch reports."""
    done: dict[str, int] = {}
    for line in batch_lines(log):
        for part, nxt in line["input_offsets"].items():
            done[part] = max(done.get(part, 0), nxt)
    return done


def replicas(client: dict, topic: str) -> list[tuple[int, int]]:
    """(replica count, in-sync count) per partition."""
    meta = AdminClient(client).list_topics(topic, timeout=30).topics[topic]
    return [(len(p.replicas), len(p.isrs)) for p in meta.partitions.values()]


# -- three brokers, one killed while the job runs ----------------------------------------------

@pytest.fixture
def cluster(tmp_path_factory) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path_factory.mktemp("kafka3"), brokers=3, heap="384m")
    kafka.start(timeout=180)
    yield kafka
    kafka.stop()


def test_job_survives_a_killed_broker_and_table_and_changelog_stay_exact(spark, cluster,
                                                                         tmp_path):
    client = cluster.client_config()
    # Few, large batches (each costs a MERGE and a publication whatever its size), but the
    # first phase alone needs two, so the broker dies while the job is mid-run.
    conf_path = cluster_profile(tmp_path, cluster.bootstrap_servers, replication=3,
                              max_offsets=450)
    conf = load(conf_path)
    create_topics(client, conf_path)
    changelog = conf.kafka.changelog_topic
    for name in (conf.kafka.input_topic, changelog, changelog + "-progress"):
        assert set(replicas(client, name)) == {(3, 3)}, name
    producer = Producer({**client, "enable.idempotence": True, "acks": "all",
                         "log_level": 3})
    now = int(time.time() * 1000)
    first, second = records(900, 0, now), records(900, 900, now)
    log = tmp_path / "job.log"
    with log.open("w") as out:
        job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)], stdout=out,
                               stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        produce(producer, conf.kafka.input_topic, first)
        wait_until(lambda: job.poll() is not None or sum(consumed_offsets(log).values()) > 0,
                   timeout=180, interval=0.5, what="the job's first batch")
        assert job.poll() is None, log.read_text()[-5000:]
        # Kill the leader of changelog partition 0: the publisher is mid-stream on it.
        meta = AdminClient(client).list_topics(changelog, timeout=30).topics[changelog]
        victim = meta.partitions[0].leader
        cluster.kill_node(victim)
        produce(producer, conf.kafka.input_topic, second)  # acks=all: 2 in-sync of 3 suffice
        wanted = {str(p): n for p, n in enumerate(
            [sum(1 for r in first + second if r.partition == p) for p in (0, 1)])}
        wait_until(lambda: job.poll() is not None or consumed_offsets(log) == wanted,
                   timeout=240, interval=0.5, what="the job to consume all input")
        # The job keeps going, no restart: the same process consumes everything. The
        # publisher's transactional producer (librdkafka) and Spark's Kafka source fail over
        # to the new leaders by themselves; if the victim led an input partition, Spark's
        # offset reader (a Java AdminClient) can wait out its default.api.timeout.ms (60 s)
        # once on the stale leader before its own retry succeeds (a stall, not a failure).
        assert job.poll() is None, "the job died with the broker:\n" + log.read_text()[-8000:]
        job.send_signal(signal.SIGTERM)
        assert job.wait(timeout=120) == 0, log.read_text()[-8000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    text = log.read_text()
    assert "stopped:" in text and "records=1800" in text
    assert table_rows(spark, conf.store.path) == expected_table(first + second, now)
    drill = ttl("drill", "--conf", str(conf_path), cwd=tmp_path)  # one broker still down
    assert drill.returncode == 0, drill.stdout[-3000:] + drill.stderr[-5000:]
    assert "drill MATCH" in drill.stdout
    cluster.restart_node(victim)
    wait_until(lambda: set(replicas(client, changelog)) == {(3, 3)}, timeout=120,
               interval=0.5, what="the restarted broker back in sync")


# -- SASL/PLAIN ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sasl_kafka(tmp_path_factory) -> Iterator[LocalKafka]:
    kafka = LocalKafka(tmp_path_factory.mktemp("kafka-sasl"),
                       sasl_users={SASL_USER: SASL_PASSWORD})
    kafka.start()
    yield kafka
    kafka.stop()


def _leaks(root: Path, suffixes: tuple[str, ...] | None = None) -> list[Path]:
    """Files under ``root`` (only ``suffixes``, if given) that contain the password."""
    needle = SASL_PASSWORD.encode()
    return [p for p in root.rglob("*") if p.is_file()
            and (suffixes is None or p.name.endswith(suffixes))
            and needle in p.read_bytes()]


def test_sasl_job_and_drill_authenticate_and_never_reveal_the_password(spark, sasl_kafka,
                                                                        tmp_path):
    conf_path = cluster_profile(tmp_path, sasl_kafka.bootstrap_servers, sasl=True)
    conf = load(conf_path)
    assert SASL_PASSWORD not in conf_path.read_text()
    create_topics(sasl_kafka.client_config(), conf_path, env=SASL_ENV, cwd=tmp_path)
    now = int(time.time() * 1000)
    batch = records(300, 0, now)
    produce(Producer({**sasl_kafka.client_config(), "acks": "all", "log_level": 3}),
            conf.kafka.input_topic, batch)
    run = ttl("run", "--conf", str(conf_path), "--available-now", env=SASL_ENV, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-5000:]
    assert "records=300" in run.stdout
    assert table_rows(spark, conf.store.path) == expected_table(batch, now)
    drill = ttl("drill", "--conf", str(conf_path), env=SASL_ENV, cwd=tmp_path)
    assert drill.returncode == 0, drill.stdout[-3000:] + drill.stderr[-5000:]
    assert "drill MATCH" in drill.stdout
    printed = subprocess.run(
        [TTL_BIN, "submit", "--print", "--conf", str(conf_path),
         "jobs/stream.py"], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT,
        env={**os.environ, **SASL_ENV})
    assert printed.returncode == 0, printed.stderr[-3000:]
    assert str(conf_path) in printed.stdout
    for proc in (run, drill, printed):
        assert SASL_PASSWORD not in proc.stdout + proc.stderr
    assert _leaks(tmp_path) == []  # store, checkpoint, drills, anything the jobs wrote
    assert _leaks(sasl_kafka.data_dir, (".log",)) == []  # the broker's own logs


def test_sasl_wrong_password_fails_with_a_clear_error_instead_of_hanging(sasl_kafka,
                                                                         tmp_path):
    conf_path = cluster_profile(tmp_path, sasl_kafka.bootstrap_servers, sasl=True)
    create_topics(sasl_kafka.client_config(), conf_path, env=SASL_ENV, cwd=tmp_path)
    wrong = {**SASL_ENV, "TTL_TEST_KAFKA_PASSWORD": "not-" + SASL_PASSWORD[:6]}
    started = time.monotonic()
    run = ttl("run", "--conf", str(conf_path), "--available-now", env=wrong, cwd=tmp_path,
              timeout=240)
    # One line, exit 2 (configuration), found before Spark even starts (ttl.stream's
    # check_kafka_access): before that check it was 30 s of retries and a traceback saying
    # "Broker transport failure".
    assert run.returncode == 2, run.stderr[-5000:]
    assert "refused the credentials" in run.stderr
    assert "Invalid username or password" in run.stderr
    assert "Traceback" not in run.stderr
    assert time.monotonic() - started < 60
    assert wrong["TTL_TEST_KAFKA_PASSWORD"] not in run.stdout + run.stderr
