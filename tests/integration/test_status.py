"""``ttl health`` on a real broker and a real store table."""

from __future__ import annotations

import uuid

import pytest

from tests.support import clients, wait_until
from ttl import config, status
from ttl.changelog import topic
from ttl.record import InputRecord
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration


def test_health_without_the_progress_topic_is_unhealthy_naming_it_and_the_action(
        spark, kafka, tmp_path):
    """Issue 31, scenario 8: with the brokers reachable and no progress topic, nothing is
    published and the lag cannot be measured; `ttl health` said healthy. Once `ttl topic
    create` made the topics, the same store is healthy (its lag is measured)."""
    name = f"health-{uuid.uuid4().hex[:8]}"
    conf = config.from_dict({
        "store": {"name": "health", "path": str(tmp_path / "store")},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name},
        "stream": {"checkpoint": str(tmp_path / "checkpoint")},
    })
    store = DeltaStore(spark, conf.store)
    store.apply_records([InputRecord(b"k", b"v", store.wall_clock.now_ms(), (), 0, 0)])
    kafka_clients = clients(conf, kafka)

    missing = status.health(conf, kafka_clients)

    assert not missing.ok
    assert missing.line() == (
        f"unhealthy: the changelog {name} has no progress topic {name}-progress, so nothing "
        "is published: run `ttl topic create`, then `ttl run`")
    topic.create(kafka_clients, conf.changelog)
    # A topic just created may take a moment to have a leader (until then: "no topic").
    wait_until(lambda: status.health(conf, kafka_clients).ok, timeout=30,
               what="health once the progress topic exists")
