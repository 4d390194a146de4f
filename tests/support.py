"""Helpers for tests: polling with a deadline (never sleeps as synchronisation)."""

from __future__ import annotations

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
