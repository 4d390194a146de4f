"""Helpers for tests: polling with a deadline (never sleeps as synchronisation)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(check: Callable[[], T], timeout: float = 30.0, interval: float = 0.1,
               what: str = "condition") -> T:
    """Poll ``check`` until it returns a truthy value or the deadline passes."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def consume_all(bootstrap: str, topic: str, expected: int, timeout: float = 30.0,
                isolation: str = "read_committed") -> list:
    """Read ``expected`` messages from the beginning of ``topic`` (fails if fewer arrive)."""
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"test-{uuid.uuid4().hex}",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
        "isolation.level": isolation,
    })
    consumer.subscribe([topic])
    messages: list = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                messages.append(msg)
    finally:
        consumer.close()
    assert len(messages) >= expected, f"got {len(messages)} of {expected} messages from {topic}"
    return messages


def bulk_load(spark, path: str, keys: int, ts: int, ttl: int | None, *, offset: int = 0,
              prefix: str = "k") -> None:
    """Append ``keys`` rows straight into a v3 store table in one commit (fixtures, benches).

    Keys are ``<prefix><id>`` for ids ``offset .. offset + keys - 1``.
    """
    from pyspark.sql import functions as F

    expires = (F.lit(ts) + F.lit(ttl)) if ttl is not None else F.lit(None).cast("bigint")
    key = F.concat(F.lit(prefix), (F.col("id") + offset).cast("string")).cast("binary")
    rows = spark.range(keys).select(
        key.alias("key"),
        F.concat(F.lit("value-"), F.col("id").cast("string")).cast("binary").alias("value"),
        F.lit(ts).cast("bigint").alias("ts"),
        F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
        expires.cast("bigint").alias("expires_at"),
        F.lit(ts).cast("bigint").alias("updated_at"),
        F.xxhash64(key).alias("key_hash"),
        F.lit(None).cast("bigint").alias("record_ttl"),
    )
    rows.write.format("delta").mode("append").save(path)


def rebuild_from_changelog(messages) -> dict[bytes, tuple[bytes, tuple]]:
    """Replay changelog messages into a dict (key -> (value, headers)); tombstones delete."""
    state: dict[bytes, tuple[bytes, tuple]] = {}
    for msg in messages:
        if msg.value() is None:
            state.pop(msg.key(), None)
        else:
            state[msg.key()] = (msg.value(), tuple(msg.headers() or ()))
    return state


def retrying(action: Callable[[], T], attempts: int = 20) -> T:
    """Run a Delta write, retrying when a concurrent writer's commit conflicts with it."""
    from delta.exceptions import ConcurrentAppendException, ConcurrentDeleteReadException

    for _ in range(attempts):
        try:
            return action()
        except (ConcurrentAppendException, ConcurrentDeleteReadException):
            continue
    raise AssertionError(f"{attempts} conflicting commits in a row")


def run_concurrently(*actions: Callable[[], object]) -> None:
    """Run the actions in threads at once; re-raise the first failure in the caller."""
    import threading

    errors: list[BaseException] = []

    def guarded(action: Callable[[], object]) -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(a,)) for a in actions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def operator_sql(spark, path: str, keys: list[bytes], rounds: int = 4) -> None:
    """An operator's SQL DELETE and UPDATE behind the engine's back, in its own session."""
    session = spark.newSession()
    for i in range(rounds):
        retrying(lambda i=i: session.sql(
            f"DELETE FROM delta.`{path}` WHERE key = X'{keys[i].hex()}'"))
        retrying(lambda i=i: session.sql(
            f"UPDATE delta.`{path}` SET value = X'6f70' WHERE key = X'{keys[10 + i].hex()}'"))


def clients(conf, broker):
    """The engine's Kafka clients for a profile (``Config`` or ``KafkaConfig``) on a test
    broker (``LocalKafka``)."""
    from ttl.kafka import KafkaClients

    return KafkaClients(getattr(conf, "kafka", conf), broker.bootstrap_servers)


def age_log(path: str, seconds: float) -> None:
    """Every file of the table's log (a local directory: a table's, or the one an S3
    server keeps its objects in) as if written ``seconds`` ago, a version a second
    (Delta's clean-up judges a file's age by its modification time, and takes a file no
    newer than the version before it for a clock's skew)."""
    log_dir = os.path.join(path, "_delta_log")
    then = time.time() - seconds
    for name in os.listdir(log_dir):
        at = then + (int(name[:20]) if name[:20].isdigit() else 0)
        os.utime(os.path.join(log_dir, name), (at, at))
