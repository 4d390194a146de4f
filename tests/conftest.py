"""Shared fixtures: one Kafka broker and one SparkSession for the whole test run."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.support import wait_until  # noqa: F401  (re-exported for tests)


def pytest_collection_modifyitems(config, items) -> None:
    """Tests marked ``long`` run only with ``TTL_LONG=1`` (the suite's long mode): they are
    deselected otherwise, not skipped, so nothing reports them as run."""
    if os.environ.get("TTL_LONG"):
        return
    long = [item for item in items if item.get_closest_marker("long")]
    if long:
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if not item.get_closest_marker("long")]


@pytest.fixture(scope="session")
def kafka() -> Iterator:
    """A real single-node KRaft broker on 127.0.0.1, shared by every test."""
    from ttl.local.kafka import LocalKafka

    broker = LocalKafka().start()
    logging.getLogger("tests").info("broker started in %.1f s", broker.startup_seconds)
    yield broker
    broker.stop()

@pytest.fixture(scope="session")
def spark():
    """One SparkSession for the run (restarting it between tests is slow and flaky)."""
    from ttl.spark import get_session

    session = get_session(overrides={"spark.sql.shuffle.partitions": "2"})
    yield session
    session.stop()

@pytest.fixture
def topic_factory(kafka) -> Callable[..., str]:
    """Create a uniquely named topic: ``topic_factory(partitions=1, config={...})``."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})

    def create(prefix: str = "t", partitions: int = 1, config: dict | None = None) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        futures = admin.create_topics(
            [NewTopic(name, partitions, 1, config=config or {})], operation_timeout=30
        )
        futures[name].result()
        return name

    return create

@pytest.fixture
def table_path(tmp_path) -> str:
    return str(tmp_path / f"table-{time.monotonic_ns()}")
