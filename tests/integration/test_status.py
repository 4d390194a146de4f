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


def profile(store: str, kafka, tmp_path) -> tuple[str, config.Config]:
    """A store's profile on the test broker, with a changelog topic name of its own."""
    name = f"{store}-{uuid.uuid4().hex[:8]}"
    return name, config.from_dict({
        "store": {"name": store, "path": str(tmp_path / "store")},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name},
        "stream": {"checkpoint": str(tmp_path / "checkpoint")},
    })


def test_health_without_the_progress_topic_is_unhealthy_naming_it_and_the_action(
        spark, kafka, tmp_path):
    """Issue 31, scenario 8: with the brokers reachable and no progress topic, nothing is
    published and the lag cannot be measured; `ttl health` said healthy. Once `ttl topic
    create` made the topics, the same store is healthy (its lag is measured)."""
    name, conf = profile("health", kafka, tmp_path)
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


def test_a_table_created_again_at_the_path_is_refused_and_unhealthy_not_lag_0(
        spark, kafka, tmp_path):
    """Issue 31, scenario 1: the store's table is published, its directory lost, and an
    empty table created at the path (by any writer). Its versions are below the progress,
    so `ttl status` said lag 0 and the publisher published nothing of it, ever. Now the
    publisher refuses it, `ttl restore` refuses to overwrite it unseen, and health names
    the table the changelog does not continue."""
    import shutil

    from ttl.app import App
    from ttl.changelog.publisher import Publisher
    from ttl.commands import restore
    from ttl.errors import ChangelogMismatch, RestoreError

    _, conf = profile("recreated", kafka, tmp_path)
    kafka_clients = clients(conf, kafka)
    topic.create(kafka_clients, conf.changelog)
    store = DeltaStore(spark, conf.store)
    now = store.wall_clock.now_ms()
    store.apply_records([InputRecord(b"k%d" % i, b"v", now, (), 0, i) for i in range(5)])
    publisher = Publisher(spark, conf.store.path, conf.store.name, kafka_clients,
                          conf.changelog)
    try:
        assert publisher.publish().records == 5
    finally:
        publisher.close()
    shutil.rmtree(conf.store.path)
    again = DeltaStore(spark, conf.store)                            # created anew, empty
    again.apply_records([InputRecord(b"new", b"v", now, (), 0, 9)])  # a write nobody saw
    with pytest.raises(ChangelogMismatch, match="is not the table the changelog"):
        Publisher(spark, conf.store.path, conf.store.name, kafka_clients, conf.changelog)
    with pytest.raises(RestoreError, match="refusing to restore over"):
        restore(App(conf, spark=spark))
    assert again.get(b"new") == b"v"                                 # nothing overwritten
    wait_until(lambda: "is not the table" in status.health(conf, kafka_clients).line(),
               timeout=30, what="health naming the table")


def test_the_commits_read_by_name_are_delta_rss_history(spark, tmp_path):
    """``delta_rs.history`` (the commits read by their names, no listing of the log) gives
    what delta-rs's ``history`` gives for every limit, on a store's batches, sweep and
    OPTIMIZE; once the oldest commits are gone (the log's clean-up) it stops there."""
    from ttl import delta_rs, eviction

    conf = config.from_dict({"store": {"name": "h", "path": str(tmp_path / "store"),
                                       "ttl": "1s"},
                             "kafka": {"input_topic": "in", "changelog_topic": "out"},
                             "stream": {"checkpoint": str(tmp_path / "checkpoint")}})
    store = DeltaStore(spark, conf.store)
    now = store.wall_clock.now_ms()
    for i in range(4):
        store.apply_records([InputRecord(b"k%d" % i, b"v", now - 5_000 + i, (), 0, i)])
    eviction.sweep(store, "wall", now)
    spark.sql(f"OPTIMIZE delta.`{conf.store.path}`")
    table = status.open_table(conf)
    fields = ("version", "timestamp", "operation", "userMetadata", "operationMetrics",
              "operationParameters")
    for limit in (1, 3, table.version() + 1, table.version() + 5):
        ours = delta_rs.history(table, conf.store.path, limit)
        theirs = table.history(limit)
        assert [[c.get(f) for f in fields] for c in ours] == \
            [[c.get(f) for f in fields] for c in theirs], limit
        assert len(ours) == min(limit, table.version() + 1)
    (tmp_path / "store" / "_delta_log" / f"{2:020d}.json").unlink()
    assert [c["version"] for c in delta_rs.history(table, conf.store.path, 100)] == \
        list(range(table.version(), 2, -1))
    assert delta_rs.history(table, f"file://{conf.store.path}", 1)[0]["version"] == \
        table.version()
