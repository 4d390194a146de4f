"""The local broker: produce/consume with headers and tombstones, compacted topics, Spark's
Kafka source in a bounded batch, and no JVM left behind when Python dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, ConfigResource

from tests.support import consume_all, wait_until

pytestmark = pytest.mark.integration

HEADERS = [("h", b"1"), ("nullable", None), ("h", b"2"), ("empty", b"")]


def _produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    producer.produce(topic, key=b"k1", value=b"v1", headers=HEADERS)
    producer.produce(topic, key=b"k1", value=None, headers=[("why", b"delete")])
    producer.produce(topic, key=b"", value=b"", headers=[])
    assert producer.flush(30) == 0


def test_headers_keep_order_duplicates_and_nulls_and_tombstones_arrive(kafka, topic_factory):
    topic = topic_factory("roundtrip")
    _produce(kafka.bootstrap_servers, topic)
    msgs = consume_all(kafka.bootstrap_servers, topic, expected=3)
    assert [(m.key(), m.value()) for m in msgs] == [(b"k1", b"v1"), (b"k1", None), (b"", b"")]
    assert msgs[0].headers() == HEADERS
    assert msgs[1].headers() == [("why", b"delete")]


def test_compacted_topic_reads_back_cleanup_policy(kafka, topic_factory):
    topic = topic_factory("compacted", config={"cleanup.policy": "compact"})
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result()
    assert configs["cleanup.policy"].value == "compact"


def test_spark_kafka_source_reads_headers_in_a_bounded_batch(spark, kafka, topic_factory):
    topic = topic_factory("spark")
    _produce(kafka.bootstrap_servers, topic)
    _produce(kafka.bootstrap_servers, topic)  # offsets 3..5 fall outside the bounded read
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("startingOffsets", f'{{"{topic}":{{"0":0}}}}')
        .option("endingOffsets", f'{{"{topic}":{{"0":3}}}}')
        .load()
        .orderBy("offset")
        .collect()
    )
    assert [r.offset for r in rows] == [0, 1, 2]
    assert [(bytes(h.key.encode()), None if h.value is None else bytes(h.value))
            for h in rows[0].headers] == [(k.encode(), v) for k, v in HEADERS]
    assert rows[1].value is None
    assert bytes(rows[2].key) == b""


def test_broker_does_not_outlive_a_killed_python_process(tmp_path):
    script = textwrap.dedent(
        f"""
        import sys, signal
        sys.path.insert(0, {os.getcwd()!r})
        from ttl.local.kafka import LocalKafka
        k = LocalKafka({str(tmp_path / 'kafka')!r}).start()
        print(k.process.pid, flush=True)
        signal.pause()
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    jvm_pid = int(parent.stdout.readline())
    assert _alive(jvm_pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    wait_until(lambda: not _alive(jvm_pid), timeout=30, what=f"JVM {jvm_pid} to die")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_a_cluster_id_that_starts_with_a_dash_still_formats(monkeypatch, tmp_path):
    """Random ids are base64: 1 in 32 starts with "-", which kafka-storage's argument parser
    took for an option (a session-wide broker fixture then failed every Kafka test)."""
    import base64
    import uuid

    from ttl.local.kafka import LocalKafka

    dashed = uuid.UUID(bytes=base64.urlsafe_b64decode("-" + "A" * 21 + "=="))
    monkeypatch.setattr(uuid, "uuid4", lambda: dashed)
    with LocalKafka(tmp_path / "kafka") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        assert admin.list_topics(timeout=30).brokers
