"""Format upgrades: v1 and v2 tables become v3 in place (resumable, rollback) or by roll-over."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from tests.support import clients
from ttl import app, commands, delta_log, upgrade
from ttl.clock import FixedClock
from ttl.config import from_dict
from ttl.errors import LayoutError
from ttl.restore import restore
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000
TTL = 3_600_000


def conf_for(path: str, kafka=None, changelog: str = "unused", **maintenance):
    return from_dict({"store": {"name": "legacy", "path": path, "ttl": TTL},
                      "kafka": {"bootstrap_servers": kafka.bootstrap_servers if kafka
                                else "embedded", "input_topic": "x",
                                "changelog_topic": changelog},
                      "stream": {"checkpoint": "unused"}, "maintenance": maintenance})


def legacy_table(spark, path: str, version: int) -> None:
    if version == 1:
        rows = [(b"a", b"1"), (b"b", b"2"), (b"", b"")]
        spark.createDataFrame(rows, "key binary, value binary").write.format("delta").save(path)
    else:
        rows = [(b"a", b"1", NOW - 10), (b"b", b"2", None), (b"c", b"3", -5)]
        spark.createDataFrame(rows, "key binary, value binary, ts bigint") \
            .write.format("delta").save(path)


@pytest.mark.parametrize("version", [1, 2])
def test_in_place_upgrade_keeps_every_entry_and_backfills_timestamps(spark, table_path,
                                                                     version):
    legacy_table(spark, table_path, version)
    conf = conf_for(table_path)
    with pytest.raises(LayoutError, match=f"v{version}"):
        DeltaStore(spark, conf.store)
    assert upgrade.detect(spark, table_path) == version
    upgrade.upgrade_in_place(spark, conf, clock=FixedClock(NOW))
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    entries = store.entries()
    if version == 1:
        assert {k: (e.value, e.ts, e.headers) for k, e in entries.items()} == {
            b"a": (b"1", NOW, ()), b"b": (b"2", NOW, ()), b"": (b"", NOW, ())}
    else:
        assert {k: (e.value, e.ts, e.expires_at) for k, e in entries.items()} == {
            b"a": (b"1", NOW - 10, NOW - 10 + TTL), b"b": (b"2", NOW, NOW + TTL)}
        # c (ts -5, far in the past) is kept in the table, merely expired
        assert store.entries(at=-(2**63))[b"c"].expires_at == -5 + TTL
    assert "already" in upgrade.upgrade_in_place(spark, conf)


def test_a_half_done_upgrade_resumes_or_rolls_back(spark, table_path):
    legacy_table(spark, table_path, 2)
    conf = conf_for(table_path)
    spark.sql(f"ALTER TABLE delta.`{table_path}` SET TBLPROPERTIES "
              f"('{upgrade.PROP_FROM_VERSION}' = '0')")
    spark.sql(f"ALTER TABLE delta.`{table_path}` ADD COLUMNS (headers "
              "ARRAY<STRUCT<key: STRING, value: BINARY>>)")       # interrupted here
    upgrade.rollback(spark, conf)
    assert spark.read.format("delta").load(table_path).columns == ["key", "value", "ts"]
    spark.sql(f"ALTER TABLE delta.`{table_path}` ADD COLUMNS (headers "
              "ARRAY<STRUCT<key: STRING, value: BINARY>>)")       # interrupted again
    upgrade.upgrade_in_place(spark, conf, clock=FixedClock(NOW))  # resumes
    assert len(DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW)).entries()) == 2


def test_rollback_refuses_a_completed_upgrade_the_store_has_written_since(spark, table_path):
    """Reliability 11: right after a completed upgrade a rollback still works; once the
    store has written (a batch), it is refused naming the writes, and nothing changes."""
    from ttl.record import InputRecord

    legacy_table(spark, table_path, 2)
    conf = conf_for(table_path)
    upgrade.upgrade_in_place(spark, conf, clock=FixedClock(NOW))
    assert "rolled back" in upgrade.rollback(spark, conf)           # nothing written since
    assert upgrade.detect(spark, table_path) == 2
    upgrade.upgrade_in_place(spark, conf, clock=FixedClock(NOW))
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"new", b"v", NOW, (), 0, 0)])
    before = store.entries()
    with pytest.raises(LayoutError, match=r"written since \(versions \d+ (MERGE|WRITE)"):
        upgrade.rollback(spark, conf)
    assert upgrade.detect(spark, table_path) == 3
    assert store.entries() == before and b"new" in before


def test_roll_over_restores_a_v3_table_from_a_legacy_changelog(spark, kafka, table_path,
                                                               topic_factory, tmp_path):
    legacy_table(spark, table_path, 1)
    changelog = topic_factory("legacy", config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for r in spark.read.format("delta").load(table_path).collect():
        producer.produce(changelog, key=bytes(r.key), value=bytes(r.value), timestamp=NOW)
    producer.flush(30)
    new_path = str(tmp_path / f"v3-{uuid.uuid4().hex[:6]}")
    conf = conf_for(new_path, kafka, changelog)
    restore(spark, conf, clients(conf, kafka), new_path, converter="plain")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    assert {k: e.value for k, e in store.entries().items()} == {
        bytes(r.key): bytes(r.value) for r in spark.read.format("delta").load(table_path)
        .collect()}


def test_upgrade_of_a_v3_store_gives_it_the_configured_layout_and_publishes_nothing(
        spark, table_path):
    """``ttl upgrade`` on a v3 table applies ``maintenance.cluster_by``: with ``key_hash``
    one OPTIMIZE orders its files by ``key_hash`` (narrow ranges: a key is in one or two
    files' range, at a boundary), a commit that
    changes no row (so the changelog gets nothing); the entries stay as they were."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from ttl.record import InputRecord
    from ttl.store.lookup import files_to_read

    conf = from_dict({"store": {"name": "legacy", "path": table_path, "ttl": TTL},
                      "kafka": {"bootstrap_servers": "embedded", "input_topic": "x",
                                "changelog_topic": "unused"},
                      "stream": {"checkpoint": "unused"},
                      "maintenance": {"cluster_by": "key_hash", "optimize_file_bytes": 4096}})
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    for batch in range(3):
        store.apply_records([InputRecord(b"k%04d" % i, b"v", NOW, (), 0, i)
                             for i in range(batch * 400, batch * 400 + 400)])
    entries = store.entries()
    before = delta_log.latest_version(spark, table_path)
    said = commands.upgrade(app.App(conf, spark=spark, wall_clock=FixedClock(NOW)),
                            rollback=False)
    assert "already format v3" in said and "ordered by key_hash" in said, said
    files = pa.table(DeltaTable(table_path).get_add_actions(flatten=True))
    assert files.num_rows > 3
    for key in (b"k%04d" % i for i in range(0, 1200, 60)):  # each within 1-2 files' ranges
        assert files_to_read(files, pa.array([key], pa.binary())) <= 2, key
    changed = [v for v in range(before + 1, delta_log.latest_version(spark, table_path) + 1)
               if (info := delta_log.commit_info(spark, table_path, v)) is not None
               and info.operation not in ("OPTIMIZE", "SET TBLPROPERTIES")]
    assert changed == []  # the lease's and the layout's commits change no row
    assert DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW)).entries() == entries


def test_ttl_upgrade_of_a_legacy_table_can_still_be_rolled_back(spark, table_path):
    """The layout's OPTIMIZE after the format upgrade changes no row, nor does the property
    commit that records it (``ttl.maintenance.optimized_at``): a rollback right after
    ``ttl upgrade`` is not refused as if the store had been written since (here the
    ``both`` layout, whose rewrite is an OPTIMIZE commit of the engine's own making)."""
    legacy_table(spark, table_path, 2)
    runtime = app.App(conf_for(table_path, cluster_by="both"), spark=spark,
                      wall_clock=FixedClock(NOW))
    said = commands.upgrade(runtime, rollback=False)
    assert "upgraded in place" in said and "by expiry group, then key_hash" in said, said
    latest = delta_log.latest_version(spark, table_path)
    assert [delta_log.commit_info(spark, table_path, v).operation
            for v in (latest - 1, latest)] == ["OPTIMIZE", "SET TBLPROPERTIES"]
    assert upgrade.detect(spark, table_path) == 3
    assert "rolled back" in commands.upgrade(runtime, rollback=True)
    assert upgrade.detect(spark, table_path) == 2
