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
