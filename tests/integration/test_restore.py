"""Restore and drills on a real broker and real Delta tables."""

from __future__ import annotations

import os
import random
import uuid

import pytest
from confluent_kafka import Producer

from tests.support import clients, operator_sql, retrying, run_concurrently
from ttl import app, commands, delta_log, drill, eviction, single_writer
from ttl.changelog import topic
from ttl.changelog.progress import read_progress
from ttl.changelog.publisher import Publisher
from ttl.clock import FixedClock
from ttl.config import from_dict
from ttl.errors import ConfigError, LayoutError
from ttl.record import InputRecord
from ttl.restore import RestoreError, State, restore
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def make_conf(tmp_path, kafka, ttl="60s", clock="wall"):
    name = f"rs-{uuid.uuid4().hex[:8]}"
    conf = from_dict({
        "store": {"name": name, "path": str(tmp_path / "store"), "ttl": ttl},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name, "changelog_partitions": 2},
        "eviction": {"clock": clock},
        "stream": {"checkpoint": str(tmp_path / "ckpt")},
    })
    topic.create(clients(conf, kafka), conf.changelog)
    return conf


def workload(spark, conf, kafka, wall: FixedClock, batches: int = 4) -> DeltaStore:
    """Puts, deletes, expiries from both clocks, and an operator's SQL DELETE/UPDATE racing
    the batches and sweeps (a concurrent writer), all published."""
    store = DeltaStore(spark, conf.store, clock="both", wall_clock=wall)
    rng = random.Random(3)
    keys = [f"k{i}".encode() for i in range(25)]

    def engine() -> None:
        offset = 0
        for b in range(batches):
            recs = []
            for _ in range(20):
                key = rng.choice(keys)
                value = None if rng.random() < 0.15 else f"v{b}-{offset}".encode()
                hdrs = (("h", str(offset).encode()), ("z", None), ("h", b"dup"))
                ts = wall.now_ms() - rng.randint(0, 70_000)
                extra = (("ttl.ttl", b"1000"),) if rng.random() < 0.1 else ()
                recs.append(InputRecord(key, value, -1, (("ttl.ts", str(ts).encode()), *hdrs,
                                                         *extra), 0, offset))
                offset += 1
            retrying(lambda recs=recs: store.apply_records(recs))
            wall.advance(20_000)
            eviction.sweep(store, "wall")
            eviction.sweep(store, "stream")

    run_concurrently(engine, lambda: operator_sql(spark, conf.store.path, keys, rounds=3))
    spark.sql(f"UPDATE delta.`{conf.store.path}` SET value = X'6f70' WHERE key = X'6b31'")
    publisher = Publisher(spark, conf.store.path, conf.store.name,
                          clients(conf, kafka), conf.changelog)
    publisher.publish()
    publisher.close()
    return store


def rows(spark, path) -> dict:
    return {bytes(r.key): (bytes(r.value), r.ts, tuple((h.key, h.value and bytes(h.value))
                                                         for h in r.headers), r.expires_at)
            for r in spark.read.format("delta").load(path).collect()}


def test_restore_and_drill_match_after_a_long_workload_and_restore_is_idempotent(
        spark, kafka, tmp_path):
    conf = make_conf(tmp_path, kafka)
    workload(spark, conf, kafka, FixedClock(NOW))
    target = str(tmp_path / "restored")
    first = restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW)
    assert first.state is State.DONE and first.keys_restored > 0
    assert rows(spark, target) == rows(spark, conf.store.path)
    second = restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW)
    # One overwrite each; after the first, one metadata commit set the new table's version
    # offset (so its changelog versions continue after the store's).
    assert second.version == first.version + 2 and second.changelog_version > \
        first.changelog_version
    assert rows(spark, target) == rows(spark, conf.store.path)
    previous = spark.read.format("delta").option("versionAsOf", first.version).load(target)
    assert previous.count() == first.keys_restored            # reachable by time travel
    report = drill.run(spark, conf, clients(conf, kafka), report_path=tmp_path / "r.json")
    assert report.match, report.summary()
    assert '"match": true' in (tmp_path / "r.json").read_text()
    history = spark.read.format("delta").load(conf.store.path + "_drills").collect()
    assert [h.match for h in history] == [True]


def test_drill_detects_a_row_changed_behind_the_engines_back(spark, kafka, tmp_path):
    conf = make_conf(tmp_path, kafka)
    store = workload(spark, conf, kafka, FixedClock(NOW), batches=2)
    # A key the table holds now: which keys survive depends on how the workload's operator
    # SQL (it deletes k0-k2) interleaved with the batches (k1 was gone in one run).
    held = spark.read.format("delta").load(conf.store.path).orderBy("expires_at", "key",
                                                                    ascending=False).first()
    assert held is not None, "the workload left no key"
    key = bytes(held.key)
    spark.sql(f"UPDATE delta.`{conf.store.path}` SET value = X'00' WHERE key = X'{key.hex()}'")
    version = spark.sql(f"DESCRIBE HISTORY delta.`{conf.store.path}` LIMIT 1").first().version
    publisher = Publisher(spark, conf.store.path, conf.store.name,
                          clients(conf, kafka), conf.changelog)
    publisher.reset_progress(version, store.stream_time.value, {})  # claims it, never sent
    publisher.close()
    report = drill.run(spark, conf, clients(conf, kafka))
    assert not report.match and report.different == 1
    assert report.samples["different"] == [key.decode()]


@pytest.mark.parametrize("tamper", ["drop_record", "reorder_headers"])
def test_drill_detects_a_tampered_changelog_copy(spark, kafka, tmp_path, tamper):
    conf = make_conf(tmp_path, kafka)
    workload(spark, conf, kafka, FixedClock(NOW), batches=2)
    copy = f"{conf.kafka.changelog_topic}-copy"
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics(
        [NewTopic(copy, 2, 1, config={"cleanup.policy": "compact",
                                      "message.timestamp.type": "LogAppendTime"})])[copy].result()
    msgs = _all(kafka, conf.kafka.changelog_topic)
    victim = next(i for i in range(len(msgs) - 1, -1, -1) if msgs[i].value() is not None
                  and len([h for h in msgs[i].headers() if not h[0].startswith("ttl.")]) > 1)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for i, m in enumerate(msgs):
        headers = m.headers()
        if i == victim and tamper == "drop_record":
            continue
        if i == victim:
            user = [h for h in headers if not h[0].startswith("ttl.")]
            headers = user[::-1] + [h for h in headers if h[0].startswith("ttl.")]
        producer.produce(copy, key=m.key(), value=m.value(), headers=headers,
                         partition=m.partition())
    producer.flush(30)
    report = drill.run(spark, conf, clients(conf, kafka), source_topic=copy)
    assert not report.match
    assert report.different + report.missing >= 1


def _all(kafka, name):
    from tests.e2e.test_stream_job import _consume_everything

    msgs = _consume_everything(kafka, name)
    return sorted(msgs, key=lambda m: (m.partition(), m.offset()))


def test_disaster_recovery_restores_sweeps_expired_entries_and_keeps_stream_time(
        spark, kafka, tmp_path):
    conf = make_conf(tmp_path, kafka, ttl="1h")
    now = NOW
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(now))
    store.apply_records([InputRecord(b"old", b"v", -1, (("ttl.ts", str(now - 3_000_000)
                                                        .encode()),), 0, 0),
                         InputRecord(b"new", b"v", -1, (("ttl.ts", str(now).encode()),), 0, 1)],
                        metadata={"input_offsets": {"0": 2}})
    publisher = Publisher(spark, conf.store.path, conf.store.name,
                          clients(conf, kafka), conf.changelog)
    publisher.publish()
    publisher.close()
    import shutil
    shutil.rmtree(conf.store.path)                                # the disaster
    later = FixedClock(now + 1_800_000)  # 30 min later: "old" (expires now + 10 min) is due
    text = commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                               wall_clock=later))
    assert "restore done" in text, text
    restored = DeltaStore(spark, conf.store)
    assert restored.stream_time.value == now                      # stream time restored
    keys = set(restored.entries(at=-(2**63)))
    assert keys == {b"new"}                                        # old expired meanwhile
    progress = read_progress(clients(conf, kafka), topic.progress_topic(conf.kafka.changelog_topic))
    assert progress.input_offsets == {"0": 2}                      # where the input resumes
    tombstones = [m for m in _all(kafka, conf.kafka.changelog_topic) if m.value() is None]
    assert [(m.key(), dict(m.headers())["ttl.op"]) for m in tombstones] == [(b"old", b"expire")]


def test_foreign_changelog_without_engine_headers_restores(spark, kafka, tmp_path,
                                                          topic_factory):
    conf = make_conf(tmp_path, kafka, ttl="1d")
    foreign = topic_factory("kstreams", partitions=1, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    producer.produce(foreign, key=b"a", value=b"1", headers=[("h", b"x")], timestamp=NOW)
    producer.produce(foreign, key=b"b", value=b"2", timestamp=NOW + 1)
    producer.produce(foreign, key=b"a", value=b"3", headers=[("h", None)], timestamp=NOW + 2)
    producer.produce(foreign, key=b"b", value=None, timestamp=NOW + 3)
    producer.flush(30)
    target = str(tmp_path / "foreign")
    result = restore(spark, conf, clients(conf, kafka), target, converter="plain",
                     source_topic=foreign)
    assert result.records_read == 4
    assert rows(spark, target) == {b"a": (b"3", NOW + 2, (("h", None),), NOW + 2 + 86_400_000)}


def test_a_key_in_two_partitions_is_refused_naming_it(spark, kafka, tmp_path, topic_factory):
    """Restore keeps the last record per key by offset, which means nothing across
    partitions: such a key fails the one aggregation, and nothing is written."""
    conf = make_conf(tmp_path, kafka, ttl="1d")
    foreign = topic_factory("split", partitions=2, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for partition, key in ((0, b"ok"), (0, b"tw\x00o"), (1, b"tw\x00o")):
        producer.produce(foreign, key=key, value=b"v", timestamp=NOW, partition=partition)
    producer.flush(30)
    # A key whose last record by offset (meaningless across partitions) is a tombstone.
    gone = topic_factory("split-gone", partitions=2, config={"cleanup.policy": "compact"})
    for partition, key, value in ((0, b"gone", b"v"), (1, b"x", b"v"), (1, b"gone", None)):
        producer.produce(gone, key=key, value=value, timestamp=NOW, partition=partition)
    producer.flush(30)
    for name, source, key in (("split", foreign, r"b'tw\\x00o'"), ("gone", gone, "b'gone'")):
        target = str(tmp_path / name)
        with pytest.raises(RestoreError, match=f"key {key} is in more than one changelog"):
            restore(spark, conf, clients(conf, kafka), target, converter="plain",
                    source_topic=source)
        assert not os.path.exists(os.path.join(target, "_delta_log",
                                               "00000000000000000001.json"))


def test_a_target_of_another_store_is_refused_before_the_topic_is_read(
        spark, kafka, tmp_path, topic_factory):
    """The target's layout is checked before the read: its error comes, not the one the
    read and write of this topic would raise (a key in two partitions)."""
    conf = make_conf(tmp_path, kafka, ttl="1d")
    split = topic_factory("split-layout", partitions=2, config={"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
    for partition in (0, 1):
        producer.produce(split, key=b"two", value=b"v", timestamp=NOW, partition=partition)
    producer.flush(30)
    target = str(tmp_path / "other")
    DeltaStore(spark, conf.store.model_copy(update={"name": "other", "path": target}),
               wall_clock=FixedClock(NOW))
    with pytest.raises(LayoutError, match="belongs to store 'other'"):
        restore(spark, conf, clients(conf, kafka), target, converter="plain",
                source_topic=split)
    with pytest.raises(RestoreError, match="more than one changelog partition"):
        restore(spark, conf, clients(conf, kafka), str(tmp_path / "new"), converter="plain",
                source_topic=split)


def test_a_missing_or_non_compacted_topic_is_a_clear_error(spark, kafka, tmp_path,
                                                          topic_factory):
    conf = make_conf(tmp_path, kafka)
    with pytest.raises(RestoreError, match="does not exist"):
        restore(spark, conf, clients(conf, kafka), str(tmp_path / "x"),
                source_topic="no-such-topic")
    plain = topic_factory("plain", config={"cleanup.policy": "delete"})
    with pytest.raises(RestoreError, match="cleanup.policy"):
        restore(spark, conf, clients(conf, kafka), str(tmp_path / "x"), source_topic=plain)


def test_a_killed_restore_leaves_the_target_untouched_or_complete(spark, kafka, tmp_path):
    import os
    import subprocess
    import sys
    import textwrap

    conf = make_conf(tmp_path, kafka)
    workload(spark, conf, kafka, FixedClock(NOW), batches=2)
    target = str(tmp_path / "target")
    restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW)
    before = rows(spark, target)
    version = spark.sql(f"DESCRIBE HISTORY delta.`{target}` LIMIT 1").first().version
    script = textwrap.dedent(f"""
        import os, signal, sys, threading
        sys.path.insert(0, {os.getcwd()!r})
        from ttl import restore as r
        from ttl.config import Config
        from ttl.spark import get_session
        from ttl.kafka import KafkaClients
        write = r._write
        def write_then_die(*args, **kwargs):
            threading.Timer(1.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
            write(*args, **kwargs)
            threading.Event().wait(10)  # killed while writing, or right after the commit
        r._write = write_then_die
        spark = get_session(overrides={{"spark.sql.shuffle.partitions": "2"}})
        conf = Config.model_validate_json({conf.model_dump_json()!r})
        r.restore(spark, conf, KafkaClients(conf.kafka, {kafka.bootstrap_servers!r}), {target!r},
                  wall_ms={NOW})
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    after_version = spark.sql(f"DESCRIBE HISTORY delta.`{target}` LIMIT 1").first().version
    assert after_version in (version, version + 1)
    assert rows(spark, target) == before  # same content either way: never half-written


def test_an_empty_changelog_never_wipes_a_table_with_entries(spark, kafka, tmp_path,
                                                            topic_factory):
    conf = make_conf(tmp_path, kafka)
    workload(spark, conf, kafka, FixedClock(NOW), batches=1)
    empty = topic_factory("empty", config={"cleanup.policy": "compact",
                                            "message.timestamp.type": "LogAppendTime"})
    with pytest.raises(RestoreError, match="is empty"):
        restore(spark, conf, clients(conf, kafka), conf.store.path, source_topic=empty)


def test_point_in_time_restore_up_to_a_version_or_to_offsets(spark, kafka, tmp_path, caplog):
    """``--until-version V`` and ``--until-offsets`` (the changelog positions where V ends)
    both rebuild the table as it was at V, and the read reports records read of total."""
    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    put = [InputRecord(k, b"1", -1, (("ttl.ts", str(NOW).encode()), ("u", k)), 0, i)
           for i, k in enumerate([b"a", b"b", b"c", b"d"])]
    first = store.apply_records(put).version
    store.apply_records([InputRecord(b"a", b"2", -1, (("ttl.ts", str(NOW).encode()),), 0, 4),
                         InputRecord(b"b", None, -1, (("ttl.ts", str(NOW).encode()),), 0, 5)])
    publisher = Publisher(spark, conf.store.path, conf.store.name,
                          clients(conf, kafka), conf.changelog)
    publisher.publish()
    publisher.close()
    at_first = {bytes(r.key): (bytes(r.value), r.ts, r.expires_at) for r in spark.read.format(
        "delta").option("versionAsOf", first).load(conf.store.path).collect()}
    msgs = _all(kafka, conf.kafka.changelog_topic)
    ends = {p: 0 for p in range(conf.kafka.changelog_partitions)}
    for m in msgs:
        if int(dict(m.headers())["ttl.version"]) <= first:
            ends[m.partition()] = m.offset() + 1
    caplog.set_level("INFO", logger="ttl.restore")
    for name, point in (("v", {"until_version": first}), ("o", {"until_offsets": ends})):
        target = str(tmp_path / f"pit-{name}")
        result = restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW, **point)
        got = {bytes(r.key): (bytes(r.value), r.ts, r.expires_at)
               for r in spark.read.format("delta").load(target).collect()}
        assert got == at_first, point
        assert result.last_version == first and result.input_offsets == {}
        assert result.warnings == []  # records after V are younger than the compaction lag
    assert f"of {result.records_total} records (100%)" in caplog.text
    assert result.records_total == sum(ends.values()) and result.records_read <= len(msgs)
    with pytest.raises(RestoreError, match=r"every partition.*missing \[1\]"):
        restore(spark, conf, clients(conf, kafka), str(tmp_path / "x"),
                until_offsets={0: 1})


def test_a_restore_into_the_store_publishes_unpublished_versions_first(spark, kafka, tmp_path):
    """Reliability 3: a version the table committed but never published (the stream died
    before publishing it) is published before the restore reads the changelog, so the
    restore keeps it instead of silently dropping it."""
    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"published", b"v", NOW, (), 0, 0)],
                        metadata={"input_offsets": {"0": 1}})
    publisher = Publisher(spark, conf.store.path, conf.store.name,
                          clients(conf, kafka), conf.changelog)
    publisher.publish()
    publisher.close()
    store.apply_records([InputRecord(b"unpublished", b"v", NOW, (), 0, 1)],
                        metadata={"input_offsets": {"0": 2}})       # then the crash
    text = commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                               wall_clock=FixedClock(NOW)))
    assert "restore done" in text, text
    restored = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    assert set(restored.entries()) == {b"published", b"unpublished"}
    assert {m.key() for m in _all(kafka, conf.kafka.changelog_topic)} == {
        b"published", b"unpublished"}
    progress = read_progress(clients(conf, kafka), topic.progress_topic(conf.kafka.changelog_topic))
    assert progress.input_offsets == {"0": 2}


@pytest.mark.parametrize("partial", ["foreign topic", "point in time"])
def test_a_restore_the_changelog_could_not_rebuild_is_refused_for_the_store(
        spark, kafka, tmp_path, topic_factory, partial):
    """Reliability 4: into the store's own table, a foreign topic or a point-in-time restore
    would leave the store's changelog unable to rebuild it: refused naming why and what to
    do (restore elsewhere with --target), and the table is unchanged."""
    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 0)])
    before = delta_log.latest_version(spark, conf.store.path)
    kwargs = ({"source_topic": topic_factory("foreign", partitions=1,
                                             config={"cleanup.policy": "compact"}),
               "converter": "plain"} if partial == "foreign topic" else {"until_version": 0})
    with pytest.raises(RestoreError, match="--target") as refused:
        commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark), **kwargs)
    assert ("--topic" if partial == "foreign topic" else "--until-version") in str(refused.value)
    assert delta_log.latest_version(spark, conf.store.path) == before


def test_a_restore_target_where_two_drivers_could_commit_is_refused(spark, kafka, tmp_path):
    """A restore's ``--target`` is a table written like the store: on S3 under Delta's
    default log store (here, the test session's) it is refused before the restore starts,
    naming the target and the setting that fixes it."""
    conf = make_conf(tmp_path, kafka)
    with pytest.raises(ConfigError, match=r"^--target s3a://bucket/copy is on S3") as refused:
        commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark),
                         target="s3a://bucket/copy")
    assert "spark.delta.logStore.s3a.impl" in str(refused.value)


def test_the_running_sessions_settings_are_what_a_store_is_held_to(spark, kafka, tmp_path):
    """A profile may name the log store that keeps a second driver out while the session it
    runs in does not have it (a session already running keeps its own settings; Delta
    picks the log store from the session's): the session's settings are what count."""
    base = make_conf(tmp_path, kafka)
    settings = {"spark.delta.logStore.s3a.impl": single_writer.S3_CONDITIONAL}
    conf = base.model_copy(update={
        "store": base.store.model_copy(update={"path": "s3a://bucket/store"}),
        "spark": base.spark.model_copy(update={"settings": settings})})
    assert single_writer.problem(conf) is None  # the profile alone passes
    with pytest.raises(ConfigError, match=r"^store.path s3a://bucket/store is on S3.*"
                                          r"S3SingleDriverLogStore"):
        app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark).spark  # noqa: B018
    settings, default_fs = single_writer.session_view(spark)
    assert settings["spark.master"].startswith("local") and default_fs.startswith("file:")


def test_stream_time_survives_the_delta_logs_retention(spark, kafka, tmp_path):
    """Reliability 10: the log's retention drops the batches' commits (the only ones that
    recorded stream time); the store opened by the engine still recovers its stream time,
    from the changelog's progress, which every published version's stream time reaches."""
    import os
    import time

    from ttl.store.layout import set_properties

    conf = make_conf(tmp_path, kafka, ttl="1h", clock="stream")
    path = conf.store.path
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    for i, ts in enumerate((NOW, NOW + 5_000)):
        store.apply_records([InputRecord(f"k{i}".encode(), b"v", ts, (), 0, i)])
    assert store.stream_time.value == NOW + 5_000
    publisher = Publisher(spark, path, conf.store.name, clients(conf, kafka), conf.changelog)
    publisher.publish()
    publisher.close()
    # The log forgets the batches: their commit files are older than the retention, and
    # the next checkpoint cleans them up.
    set_properties(spark, path, {"delta.logRetentionDuration": "interval 7 days",
                                 "delta.checkpointInterval": "2"})
    old = time.time() - 40 * 86_400
    for name in os.listdir(f"{path}/_delta_log"):
        os.utime(f"{path}/_delta_log/{name}", (old, old))
    for i in range(3):
        spark.sql(f"UPDATE delta.`{path}` SET value = X'0{i}' WHERE key = X'6b30'")
    forgotten = delta_log.max_stream_time(spark, path)
    assert forgotten is None, forgotten                             # the log lost it
    reopened = app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                       wall_clock=FixedClock(NOW)).store()
    assert reopened.stream_time.value == NOW + 5_000


def test_a_point_in_time_restore_says_when_compaction_may_have_removed_what_it_needs(
        spark, kafka, tmp_path):
    """Reliability 6: compaction removed key a's record of version 1 (a newer record of a
    replaced it), so a restore to version 1 cannot find a. It says so (the newer record is
    older than the topic's min.compaction.lag.ms) instead of silently returning fewer keys."""
    from tests.support import wait_until

    name = f"rs-{uuid.uuid4().hex[:8]}"
    conf = from_dict({
        "store": {"name": name, "path": str(tmp_path / "store"), "ttl": "1h"},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name, "changelog_partitions": 1},
        "changelog": {"min_compaction_lag": "0s", "segment": "100ms",
                      "min_cleanable_dirty_ratio": 0.01},
        "stream": {"checkpoint": str(tmp_path / "ckpt")},
    })
    topic.create(clients(conf, kafka), conf.changelog)
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    first = store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0)]).version
    publisher.publish()
    (at_first,) = [m.offset() for m in _all(kafka, name) if m.key() == b"a"]

    def compacted() -> bool:  # newer versions of a roll segments until the cleaner runs
        store.apply_records([InputRecord(b"a", b"2", NOW + 1, (), 0, 0)])
        publisher.publish()
        return at_first not in {m.offset() for m in _all(kafka, name)}

    wait_until(compacted, timeout=120, interval=0.2, what="compaction of a's first record")
    publisher.close()
    for label, point in (("v", {"until_version": first}),
                         ("o", {"until_offsets": {0: at_first + 1}})):
        result = restore(spark, conf, clients(conf, kafka), str(tmp_path / label),
                         wall_ms=NOW, **point)
        assert result.keys_restored == 0, label                    # a is gone at that point
        assert len(result.warnings) == 1 and "min.compaction.lag.ms (0 s)" in \
            result.warnings[0] and "compaction may have removed" in result.warnings[0], label
        assert "warning: the changelog" in result.summary()
    assert restore(spark, conf, clients(conf, kafka), str(tmp_path / "all"),
                   wall_ms=NOW).warnings == []                     # the latest state is exact


@pytest.mark.parametrize("into", ["the lost store's path", "a new path"])
def test_versions_on_the_changelog_never_go_back_after_a_restore_into_a_new_table(
        spark, kafka, tmp_path, into):
    """Reliability 5: the store is rebuilt into a new table (its path after a disaster, or
    --target, then store.path moves there), whose Delta versions start again at 0. Its
    changelog versions continue after every version already on the topic, and a drill
    (which selects records by ttl.version) matches."""
    import shutil

    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    for i, (key, value) in enumerate([(b"k0", b"v"), (b"k1", b"v"), (b"k2", b"v"),
                                      (b"k3", b"v"), (b"k0", None)]):
        store.apply_records([InputRecord(key, value, NOW, (), 0, i)],
                            metadata={"input_offsets": {"0": i + 1}})
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    publisher.publish()
    publisher.close()
    old_max = publisher.progress.version
    if into == "a new path":
        target = str(tmp_path / "rebuilt")
        commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                            wall_clock=FixedClock(NOW)), target=target)
        conf = conf.model_copy(update={"store": conf.store.model_copy(update={"path": target})})
    else:
        shutil.rmtree(conf.store.path)                            # the disaster
        commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                            wall_clock=FixedClock(NOW)))
    rebuilt = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    assert delta_log.latest_version(spark, conf.store.path) < old_max  # Delta starts again
    rebuilt.apply_records([InputRecord(b"k1", b"w", NOW + 1, (), 0, 5)])
    rebuilt.apply_records([InputRecord(b"k9", b"n", NOW + 1, (), 0, 6)])
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    publisher.publish()
    publisher.close()
    by_partition: dict[int, list[int]] = {}
    for m in _all(kafka, conf.kafka.changelog_topic):
        by_partition.setdefault(m.partition(), []).append(int(dict(m.headers())["ttl.version"]))
    for versions in by_partition.values():
        assert versions == sorted(versions), by_partition           # never back
    new = {m.key(): int(dict(m.headers())["ttl.version"])
           for m in _all(kafka, conf.kafka.changelog_topic) if m.key() in (b"k1", b"k9")}
    assert min(new.values()) > old_max, (new, old_max)
    report = drill.run(spark, conf, clients(conf, kafka), wall_ms=NOW)
    assert report.match, report.summary()
    assert report.keys == 4                                         # k1=w, k2, k3, k9


def test_a_point_in_time_restore_adopted_as_the_store_is_reseeded_before_it_publishes(
        spark, kafka, tmp_path):
    """Reliability 4/5 (review): a point-in-time restore into --target, then store.path
    moved there. The changelog still holds what the restore rolled back (k1's later value,
    k2 created after the point, a trailing no-op batch's version): publishing the new table
    one version at a time would not rebuild it. The publisher refuses (ReseedRequired)
    until `ttl publish --reseed` has published its state with the tombstones, and from then
    on the changelog rebuilds the table and versions keep going up."""
    from tests.support import rebuild_from_changelog
    from ttl.errors import ReseedRequired

    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    point = store.apply_records([InputRecord(b"k1", b"old", NOW, (), 0, 0)]).version
    store.apply_records([InputRecord(b"k1", b"new", NOW + 1, (), 0, 1),
                         InputRecord(b"k2", b"v", NOW + 1, (), 0, 2)])
    store.apply_records([InputRecord(b"k1", b"stale", NOW - 10, (), 0, 3)])  # changes nothing
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    publisher.publish()
    publisher.close()
    old_max = publisher.progress.version
    target = str(tmp_path / "rolled-back")
    result = restore(spark, conf, clients(conf, kafka), target, until_version=point,
                     wall_ms=NOW)
    assert result.changelog_version > old_max                       # past the no-op too
    conf = conf.model_copy(update={"store": conf.store.model_copy(update={"path": target})})
    adopted = app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark,
                      wall_clock=FixedClock(NOW))
    publisher = adopted.publisher()
    with pytest.raises(ReseedRequired, match="ttl.changelog.reseed_required"):
        publisher.publish()
    seeded = publisher.reseed()
    assert (seeded.puts, seeded.tombstones) == (1, 1)                # k1=old, k2 gone
    DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW)).apply_records(
        [InputRecord(b"k3", b"v", NOW, (), 0, 4)])
    assert publisher.publish().records == 1
    publisher.close()
    rebuilt = rebuild_from_changelog(_all(kafka, conf.kafka.changelog_topic))
    assert {k: v for k, (v, _) in rebuilt.items()} == {b"k1": b"old", b"k3": b"v"}
    assert drill.run(spark, conf, clients(conf, kafka), wall_ms=NOW).match


def _one_key_published(spark, kafka, tmp_path):
    """A store holding one key (``k``), published: a changelog to restore from."""
    conf = make_conf(tmp_path, kafka, ttl="1h")
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"k", b"v", NOW, (), 0, 0)])
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    publisher.publish()
    publisher.close()
    return conf


def test_a_restore_target_that_is_a_live_stores_table_is_refused(spark, kafka, tmp_path):
    """A ``--target`` that is a live store's table (this store's, at the path a stream now
    runs on: the runbook restores into a new path and points ``store.path`` at it; another
    store's table is refused by its name), whose lease the stream holds, is refused before
    anything is read, naming the holder: the overwrite would replace the rows that stream
    commits. Once the lease is given back, the same restore takes it, overwrites the table
    and gives it back."""
    from ttl.config import StoreConfig
    from ttl.lease import Lease

    conf = _one_key_published(spark, kafka, tmp_path)
    other = StoreConfig(name=conf.store.name, path=str(tmp_path / "moved"), ttl=3_600_000)
    DeltaStore(spark, other, wall_clock=FixedClock(NOW)).apply_records(
        [InputRecord(b"theirs", b"v", NOW, (), 0, 0)])
    live = Lease(spark, other.path, holder="stream:other")
    assert live.acquire()
    live.start_heartbeat()
    before = delta_log.latest_version(spark, other.path)
    try:
        with pytest.raises(RestoreError, match="stream:other holds its lease") as refused:
            commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark),
                             target=other.path)
        assert "stop that writer" in str(refused.value)
        assert delta_log.latest_version(spark, other.path) == before
    finally:
        live.release()
    text = commands.restore(app.App(conf, bootstrap=kafka.bootstrap_servers, spark=spark),
                            target=other.path)
    assert "restore done" in text, text
    assert {bytes(r.key) for r in spark.read.format("delta").load(other.path)
            .collect()} == {b"k"}
    assert Lease(spark, other.path).acquire(), "the restore kept the target's lease"


def test_a_restore_whose_claim_on_its_target_is_lost_commits_nothing(spark, kafka, tmp_path):
    """The check a claimed target's restore makes before its commits (its lease's): when
    it refuses (the lease lost while the changelog was read), the target is unchanged."""
    from ttl.errors import LeaseLost

    conf = _one_key_published(spark, kafka, tmp_path)
    target = str(tmp_path / "copy")
    restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW)
    before = delta_log.latest_version(spark, target)

    def lost() -> None:
        raise LeaseLost(f"the lease on {target} was lost")

    with pytest.raises(LeaseLost):
        restore(spark, conf, clients(conf, kafka), target, wall_ms=NOW, before_write=lost)
    assert delta_log.latest_version(spark, target) == before
