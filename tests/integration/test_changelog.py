"""The changelog on a real broker: format, order, rebuild, crash, fencing, refusal, kcat."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import uuid

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.test_eviction import recs
from tests.support import (
    bulk_load,
    clients,
    consume_all,
    operator_sql,
    rebuild_from_changelog,
    retrying,
    run_concurrently,
)
from ttl.changelog import partitioned, topic
from ttl.changelog.partitioning import partition_of
from ttl.changelog.progress import read_progress
from ttl.changelog.publisher import Publisher
from ttl.clock import FixedClock
from ttl.config import ChangelogConfig, KafkaConfig, StoreConfig
from ttl.errors import PublisherFenced, TopicError
from ttl.jvm import jars
from ttl.record import InputRecord
from ttl.store import DeltaStore
from ttl.store.fold import records_table

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000
TTL = 300_000


@pytest.fixture
def kconf(kafka) -> KafkaConfig:
    name = f"cl-{uuid.uuid4().hex[:8]}"
    conf = KafkaConfig(bootstrap_servers=kafka.bootstrap_servers, input_topic=f"{name}-in",
                       changelog_topic=name, changelog_partitions=3)
    topic.create(clients(conf, kafka), ChangelogConfig())
    return conf


def make_store(spark, path, name="s", ttl=TTL, **conf) -> DeltaStore:
    return DeltaStore(spark, StoreConfig(name=name, path=path, ttl=ttl, **conf),
                      wall_clock=FixedClock(NOW))


def publisher(spark, store, kconf, kafka, **kw) -> Publisher:
    return Publisher(spark, store.path, store.conf.name,
                     clients(kconf, kafka), ChangelogConfig(**kw))


def read_changelog(kafka, kconf, expected: int):
    msgs = consume_all(kafka.bootstrap_servers, kconf.changelog_topic, expected)
    assert len(msgs) == expected
    return msgs


def engine(msg) -> dict[str, bytes]:
    return {k: v for k, v in msg.headers() or () if k.startswith("ttl.")}


def user(msg) -> list:
    return [(k, v) for k, v in msg.headers() or () if not k.startswith("ttl.")]


def table_state(spark, path) -> dict[bytes, tuple[bytes, tuple]]:
    out = {}
    for r in spark.read.format("delta").load(path).collect():
        headers = tuple((h.key, None if h.value is None else bytes(h.value)) for h in r.headers)
        engine_headers = [("ttl.ts", str(r.ts).encode())]
        out[bytes(r.key)] = (bytes(r.value), headers, engine_headers)
    return out


def as_rebuilt(table) -> dict[bytes, tuple[bytes, tuple, bytes]]:
    return {k: (v, h, ts[0][1]) for k, (v, h, ts) in table.items()}


def rebuilt_with_ts(messages) -> dict[bytes, tuple[bytes, tuple, bytes]]:
    out = {}
    for k, (v, headers) in rebuild_from_changelog(messages).items():
        user_headers = tuple((hk, hv) for hk, hv in headers if not hk.startswith("ttl."))
        out[k] = (v, user_headers, dict(headers)["ttl.ts"])
    return out


@pytest.mark.parametrize("publish_from", ["driver", "executors"])
def test_round_trip_puts_deletes_expiries_with_headers_and_negative_timestamps(
        spark, kafka, kconf, table_path, publish_from):
    store = make_store(spark, table_path)
    hdrs = (("h", b"1"), ("n", None), ("h", b"2"))
    store.apply_records([
        InputRecord(b"a", b"a1", -1, (("ttl.ts", b"-86400000"), ("ttl.ttl", b"9999999999999"),
                                      *hdrs), 0, 0),
        InputRecord(b"b", b"b1", NOW, (), 0, 1),
        InputRecord(b"c", b"c1", NOW - TTL + 10, (), 0, 2),          # live until NOW + 10
    ])
    store.apply_records([
        InputRecord(b"b", None, NOW, (), 0, 3),                        # delete
        InputRecord(b"c", b"c2", NOW - TTL, (("ttl.ttl", b"5"),), 0, 4),  # expired on arrival
    ])
    pub = publisher(spark, store, kconf, kafka, publish_from=publish_from)
    result = pub.publish()
    assert (result.records, result.puts, result.tombstones) == (5, 3, 2)
    msgs = read_changelog(kafka, kconf, 5)
    by_key: dict[bytes, list] = {}
    for m in msgs:
        by_key.setdefault(m.key(), []).append(m)
    a, = by_key[b"a"]
    assert a.value() == b"a1" and user(a) == list(hdrs)
    assert [k for k, _ in a.headers()][-5:] == ["ttl.ts", "ttl.op", "ttl.version",
                                                 "ttl.stream-time", "ttl.ttl"]
    assert engine(a) == {"ttl.ts": b"-86400000", "ttl.op": b"put", "ttl.version": b"1",
                         "ttl.stream-time": str(NOW).encode(), "ttl.ttl": b"9999999999999"}
    b_put, b_del = by_key[b"b"]
    assert b_del.value() is None
    assert engine(b_del) == {"ttl.op": b"delete", "ttl.version": b"2",
                             "ttl.stream-time": str(NOW).encode()}
    c_put, c_exp = by_key[b"c"]
    assert engine(c_exp)["ttl.op"] == b"expire" and engine(c_exp)["ttl.clock"] == b"wall"
    assert c_put.offset() < c_exp.offset() and b_put.offset() < b_del.offset()
    progress = read_progress(clients(kconf, kafka), topic.progress_topic(
        kconf.changelog_topic))
    assert (progress.version, progress.stream_time) == (2, NOW)
    assert pub.publish().records == 0  # nothing new: nothing published twice


def test_changelog_rebuilds_the_table_with_two_concurrent_writers(spark, kafka, kconf,
                                                                  table_path):
    """An operator's SQL DELETE/UPDATE racing the store's batches: the topic still rebuilds
    the table exactly (what would be lost if the publisher trusted only the engine's own
    writes)."""
    store = make_store(spark, table_path)
    rng = random.Random(7)
    keys = [f"k{i}".encode() for i in range(30)]

    def engine_writer():
        for b in range(4):
            recs = [InputRecord(rng.choice(keys), rng.choice([None, b"v%d" % b, b"w"]),
                                NOW - rng.randint(0, 100), (("b", str(b).encode()),), 0,
                                b * 100 + i) for i in range(25)]
            retrying(lambda recs=recs: store.apply_records(recs))

    run_concurrently(engine_writer, lambda: operator_sql(spark, table_path, keys))
    result = publisher(spark, store, kconf, kafka).publish()
    msgs = read_changelog(kafka, kconf, result.records)
    assert rebuilt_with_ts(msgs) == as_rebuilt(table_state(spark, table_path))


def test_a_version_that_deletes_and_reinserts_a_key_publishes_its_final_put(
        spark, kafka, kconf, table_path):
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"x", b"old", NOW, (), 0, 0)])
    current = spark.read.format("delta").load(table_path)
    current.localCheckpoint().write.format("delta").mode("overwrite").save(table_path)
    pub = publisher(spark, store, kconf, kafka)
    pub.publish()
    msgs = read_changelog(kafka, kconf, 2)
    assert [(m.key(), m.value(), engine(m)["ttl.version"]) for m in msgs] == [
        (b"x", b"old", b"1"), (b"x", b"old", b"2")]


def test_a_non_compacted_topic_is_refused_naming_cleanup_policy(kafka, topic_factory):
    bad = topic_factory("delete-policy", config={"cleanup.policy": "compact,delete",
                                                 "message.timestamp.type": "LogAppendTime"})
    topic_factory("x", config={"cleanup.policy": "compact"})
    conf = KafkaConfig(input_topic="in", changelog_topic=bad)
    with pytest.raises(TopicError, match=r"cleanup\.policy is 'compact,delete'"):
        topic.check(clients(conf, kafka), None)


def test_a_changed_partition_count_is_refused(kafka, kconf):
    with pytest.raises(TopicError, match=r"3 partitions but the table records 4"):
        topic.check(clients(kconf, kafka), 4)
    assert topic.check(clients(kconf, kafka), 3).partitions == 3


def test_a_second_publisher_fences_the_first(spark, kafka, kconf, table_path):
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"a", b"1", NOW, (), 0, 0)])
    zombie = publisher(spark, store, kconf, kafka)
    publisher(spark, store, kconf, kafka).publish()
    store.apply_records([InputRecord(b"a", b"2", NOW, (), 0, 1)])
    with pytest.raises(PublisherFenced):
        zombie.publish()
    assert len(read_changelog(kafka, kconf, 1)) == 1


@pytest.mark.parametrize("publish_from", ["driver", "executors"])
def test_partitions_match_the_java_client(spark, kafka, kconf, table_path, tmp_path,
                                          publish_from):
    """librdkafka's partitioner (the driver's producer) and ours (the executors' producers
    are told the partition) both put each key where the Java client would."""
    store = make_store(spark, table_path)
    keys = [b"", b"a", b"\x00\xff", "ключ".encode(), *(f"key-{i}".encode() for i in range(40))]
    store.apply_records([InputRecord(k, b"v", NOW, (), 0, i) for i, k in enumerate(keys)])
    publisher(spark, store, kconf, kafka, publish_from=publish_from).publish()
    msgs = read_changelog(kafka, kconf, len(keys))
    java = _java_partitions(tmp_path, keys, 3)
    assert {m.key(): m.partition() for m in msgs} == java


def _java_partitions(tmp_path, keys: list[bytes], n: int) -> dict[bytes, int]:
    classpath = os.pathsep.join(str(p) for p in jars.jars("kafka"))
    source = os.path.join(os.path.dirname(__file__), "java", "Partitions.java")
    subprocess.run(["javac", "-cp", classpath, "-d", str(tmp_path), source], check=True)
    proc = subprocess.run(["java", "-cp", f"{tmp_path}{os.pathsep}{classpath}", "Partitions",
                           str(n)], input="\n".join(k.hex() for k in keys) + "\n",
                          capture_output=True, text=True, check=True)
    return dict(zip(keys, (int(x) for x in proc.stdout.split()), strict=True))


def test_kcat_reads_keys_tombstones_and_headers(spark, kafka, kconf, table_path):
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"k1", b"v1", NOW, (("h", b"x"),), 0, 0)])
    store.apply_records([InputRecord(b"k1", None, NOW, (), 0, 1)])
    publisher(spark, store, kconf, kafka).publish()
    kcat = shutil.which("kcat")
    assert kcat, "kcat is installed by `make setup` (Debian package kcat)"
    out = subprocess.run(
        [kcat, "-b", kafka.bootstrap_servers, "-C", "-t", kconf.changelog_topic, "-e",
         "-q", "-Z", "-X", "isolation.level=read_committed", "-f", "%k|%s|%h\\n"],
        capture_output=True, text=True, timeout=60, check=True).stdout.splitlines()
    assert len(out) == 2
    put, tomb = out
    assert put.startswith("k1|v1|h=x,ttl.ts=") and "ttl.op=put" in put
    assert tomb.startswith("k1|NULL|ttl.op=delete,ttl.version=2")


def test_killed_publisher_resumes_with_no_gap_and_no_reordering(spark, kafka, kconf,
                                                               table_path, tmp_path):
    """kill -9 in the middle of a large version: read_committed readers see no partial
    version, and the restarted publisher publishes every version once, in order."""
    store = make_store(spark, table_path, ttl=None)
    bulk_load(spark, table_path, 30_000, NOW, None)                         # version 1
    store.apply_records([InputRecord(b"k5", b"new", NOW, (), 0, 0)])       # version 2
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.getcwd()!r})
        from ttl.spark import get_session
        from ttl.config import KafkaConfig, ChangelogConfig
        from ttl.changelog.publisher import Publisher
        from ttl.kafka import KafkaClients
        import os, signal
        produce, sent = Publisher._produce, [0]
        def produce_then_die(self, *args):
            produce(self, *args)
            sent[0] += 1
            if sent[0] == 10_000:  # deep inside version 1: flush, then kill -9 ourselves
                self.producer.flush(30)
                os.kill(os.getpid(), signal.SIGKILL)
        Publisher._produce = produce_then_die
        spark = get_session(overrides={{"spark.sql.shuffle.partitions": "2"}})
        kconf = KafkaConfig.model_validate_json({kconf.model_dump_json()!r})
        Publisher(spark, {table_path!r}, "s", KafkaClients(kconf, {kafka.bootstrap_servers!r}),
                  ChangelogConfig(max_records_per_transaction=10**9)).publish()
    """)
    proc = subprocess.run([sys.executable, "-c", script], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == -signal.SIGKILL
    probe = Consumer({"bootstrap.servers": kafka.bootstrap_servers, "group.id": "probe",
                      "isolation.level": "read_uncommitted"})
    written = sum(probe.get_watermark_offsets(TopicPartition(kconf.changelog_topic, p),
                                              timeout=10)[1] for p in range(3))
    probe.close()
    assert written >= 10_000  # the records are in the log, in an aborted transaction
    progress = read_progress(clients(kconf, kafka), topic.progress_topic(kconf.changelog_topic))
    assert progress.version == -1
    result = publisher(spark, store, kconf, kafka).publish()
    assert result.published_version == 2
    msgs = read_changelog(kafka, kconf, 30_001)
    versions: dict[bytes, list[int]] = {}
    for m in msgs:
        versions.setdefault(m.key(), []).append(int(engine(m)["ttl.version"]))
    assert len(versions) == 30_000
    assert versions[b"k5"] == [1, 2]
    assert all(v == [1] for k, v in versions.items() if k != b"k5")


def test_a_batch_with_many_expired_on_arrival_keys_keeps_them_out_of_its_metadata(
        spark, kafka, kconf, table_path, monkeypatch):
    """Beyond ``EXPIRED_KEYS_INLINE`` keys (1 here), a batch's expired-on-arrival keys go to
    the expired-keys table under its write's id, not into every commit's metadata; the
    changelog still tags each one's tombstone ``ttl.op=expire``, and a deleted key in the
    same batch ``delete``."""
    from ttl import delta_log
    from ttl.store import write

    monkeypatch.setattr(write, "EXPIRED_KEYS_INLINE", 1)
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(k, b"v", NOW - TTL + 10, (), 0, i)
                         for i, k in enumerate((b"a", b"b", b"c", b"d"))])
    old = (("ttl.ttl", b"5"),)
    batch = store.apply_records([InputRecord(b"a", b"x", NOW - TTL, old, 0, 4),
                                 InputRecord(b"b", b"x", NOW - TTL, old, 0, 5),
                                 InputRecord(b"c", b"x", NOW - TTL, old, 0, 6),
                                 InputRecord(b"d", None, NOW, (), 0, 7)])
    meta = delta_log.commit_info(spark, table_path, batch.version).metadata
    assert meta["expired_keys"] == write.EXPIRED_KEYS_ASIDE
    assert sorted(write.expired_keys(spark, table_path, meta)) == ["61", "62", "63"]
    publisher(spark, store, kconf, kafka).publish()
    msgs = read_changelog(kafka, kconf, 8)
    ops = sorted((m.key(), engine(m)["ttl.op"]) for m in msgs
                 if engine(m)["ttl.version"] == str(batch.version).encode())
    assert ops == [(b"a", b"expire"), (b"b", b"expire"), (b"c", b"expire"), (b"d", b"delete")]
    # VACUUM removes the rows of commits older than its retention, and only those
    from ttl import eviction
    from ttl.names import EXPIRED_KEYS_SUFFIX, sibling

    def side_rows() -> int:
        return spark.read.format("delta").load(sibling(table_path, EXPIRED_KEYS_SUFFIX)).count()

    published = delta_log.latest_version(spark, table_path)
    eviction.vacuum(store, 3_600_000, 0, published=published)
    assert side_rows() == 3  # written at NOW, the store's wall clock: within the hour
    store.wall_clock.set(NOW + 2 * 3_600_000)
    eviction.vacuum(store, 3_600_000, 0, published=published)
    assert side_rows() == 0


# A batch that only removes keys is a MERGE (change files); one that upserts is a replace
# (its change feed, read from deletion vectors, says delete + insert for an updated key and
# delete for a removed one; without deletion vectors it rewrites files and writes change
# files). Every kind must publish what the batch's own rows say.
REMOVING = [(b"gone", None, NOW + 1), (b"old", b"x", NOW - 2 * TTL, (("ttl.ttl", b"1"),))]
BATCHES = {
    "merge": (REMOVING, [(b"gone", b"delete"), (b"old", b"expire")]),
    "replace_removing": (
        [*REMOVING, (b"new", b"n", NOW + 2, (("h", b"1"), ("h", None), ("ttl.ttl", b"99999999"))),
         (b"kept", b"k", NOW + 3)],
        [(b"gone", b"delete"), (b"kept", b"put"), (b"new", b"put"), (b"old", b"expire")]),
    "replace": ([(b"gone", b"g", NOW + 1, (("h", b"2"),)),
                 (b"new", b"n", NOW + 2, (("h", b"1"), ("h", None), ("ttl.ttl", b"99999999"))),
                 (b"kept", b"k", NOW + 3, (("ttl.ttl", b"1000"),))],
                [(b"gone", b"put"), (b"kept", b"put"), (b"new", b"put")]),
}
BATCHES["positional"] = BATCHES["replace_removing"]  # ttl's replace by position of the same


@pytest.mark.parametrize("batch_kind,deletion_vectors,folded_on",
                         [("merge", True, "driver"), ("replace_removing", True, "driver"),
                          ("replace_removing", False, "driver"), ("replace", True, "driver"),
                          ("positional", True, "driver"),
                          ("replace_removing", True, "executors"),
                          ("replace_removing", True, "held"), ("merge", True, "held"),
                          ("positional", True, "executors"), ("positional", True, "held")])
def test_a_batch_published_from_its_own_changes_equals_its_change_feed(
        spark, kafka, table_path, batch_kind, deletion_vectors, folded_on, monkeypatch):
    """``publish_known`` (no change-feed read) gives exactly the records the CDF path gives
    for the same version, in the same partitions: puts with user headers and per-record
    TTLs, deletes, expiries, whichever write made the version (a replace on a table without
    deletion vectors rewrites files and writes change files: delete + insert), and wherever
    the batch was folded (the executors' change rows are collected after the commit) or
    published from ("held": the executors' change rows stay there and each changelog
    partition's producer there publishes them). ``positional``: ttl's replace by position
    (``ttl.store.positional``; on the executors' path, of the rows its fold found), whose
    change feed Delta reads from the deletion vectors it wrote; the other kinds are
    Delta's writes."""
    from ttl.store import write

    monkeypatch.setattr(write, "positional_enabled", lambda _spark: batch_kind == "positional")
    store = make_store(spark, table_path, deletion_vectors=deletion_vectors)
    store.apply_records(recs((b"gone", b"v", NOW), (b"old", b"v", NOW - TTL + 10),
                             (b"kept", b"v", NOW)))
    records, expected_ops = BATCHES[batch_kind]
    if folded_on == "driver":
        batch = store.apply_records(recs(*records), keep_changes=True)
    else:
        batch = store.apply_frame(spark.createDataFrame(records_table(list(recs(*records)))),
                                  metadata=lambda _figures: {},
                                  keep_changes="held" if folded_on == "held" else True)
    assert batch.write == batch_kind.split("_")[0]
    held = getattr(batch.changes, "frame", None)
    assert (batch.changes.num_rows if held is None else held.count()) == len(records)
    streams = {}
    for way in ("known", "feed"):
        conf = KafkaConfig(bootstrap_servers=kafka.bootstrap_servers, input_topic="i",
                           changelog_topic=f"cl-{way}-{uuid.uuid4().hex[:8]}")
        topic.create(clients(conf, kafka), ChangelogConfig())
        publish_from = "executors" if way == "known" and held is not None else "driver"
        pub = Publisher(spark, table_path, "s", clients(conf, kafka),
                        ChangelogConfig(publish_from=publish_from))
        pub.publish(until=batch.version - 1)
        if way == "known":
            known = pub.publish_known(batch.version, batch.changes)
            assert known.published_version == batch.version
            assert known.published_from == "executors" if held is not None else "driver"
        else:
            pub.publish()
        msgs = consume_all(kafka.bootstrap_servers, conf.changelog_topic,
                           3 + len(records))
        streams[way] = sorted((m.key(), m.value(), tuple(m.headers() or ()), m.partition())
                              for m in msgs
                              if engine(m)["ttl.version"] == str(batch.version).encode())
    if held is not None:
        batch.changes.release()
    assert streams["known"] == streams["feed"]
    ops = sorted((k, dict(h)["ttl.op"]) for k, _, h, _ in streams["known"])
    assert ops == expected_ops


def _committed_progress(kafka, kconf, version: int) -> str:
    """One committed progress record at ``version`` (as the publisher writes it)."""
    from confluent_kafka import Producer

    from ttl.changelog.progress import PROGRESS_KEY, Progress

    name = topic.progress_topic(kconf.changelog_topic)
    producer = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"t-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(name, key=PROGRESS_KEY,
                     value=Progress(version, NOW, {"0": 7}).to_json("s", NOW))
    producer.commit_transaction(30)
    return name


def test_progress_behind_many_aborted_transactions_is_still_found(kafka, kconf):
    """Reliability 13: a publisher that aborted more than 100 transactions in a row (a
    crash loop) leaves only skipped records and abort markers in the progress topic's last
    200 offsets; the last committed progress is still found, so publication does not
    restart from version 0."""
    from confluent_kafka import Producer

    from ttl.changelog.progress import PROGRESS_KEY

    name = _committed_progress(kafka, kconf, 41)
    aborting = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                         "transactional.id": f"t-{uuid.uuid4().hex}"})
    aborting.init_transactions(30)
    for _ in range(110):
        aborting.begin_transaction()
        aborting.produce(name, key=PROGRESS_KEY, value=b'{"version": 99}')
        assert aborting.flush(30) == 0  # in the log before the abort (not purged unsent)
        aborting.abort_transaction(30)
    progress = read_progress(clients(kconf, kafka), name)
    assert (progress.version, progress.input_offsets) == (41, {"0": 7})


def test_a_progress_read_that_cannot_finish_raises_instead_of_starting_over(kafka, kconf):
    """Reliability 13: a progress read that does not reach the topic's end in time (here
    the broker holds every fetch: the consumer asks for more bytes than the topic has and
    waits long for them) raises, naming the topic, instead of answering "nothing
    published" (version -1: publication would restart from version 0)."""
    from ttl.errors import ProgressUnreadable
    from ttl.kafka import KafkaClients

    name = _committed_progress(kafka, kconf, 41)

    class SlowFetches(KafkaClients):
        def consumer(self, **settings):
            return super().consumer(**{**settings, "fetch.min.bytes": 50_000_000,
                                       "fetch.wait.max.ms": 60_000})

    with pytest.raises(ProgressUnreadable, match=name):
        read_progress(SlowFetches(kconf, kafka.bootstrap_servers), name, timeout=3)
    assert read_progress(clients(kconf, kafka), name).version == 41  # the record is there


def test_a_publisher_whose_change_feed_is_gone_stops_and_a_reseed_goes_on(
        spark, kafka, kconf, table_path, monkeypatch):
    """Reliability 12: an operator's VACUUM RETAIN 0 HOURS removes the change data of
    versions not yet published. The publisher stops with ChangeFeedGone and the re-seed
    action (instead of a Spark trace on every start); the re-seed publishes the table's
    state (puts, and a tombstone for the key deleted in the lost versions) and publication
    goes on, so the changelog rebuilds the table."""
    import time

    from ttl import delta_log, eviction
    from ttl.errors import ChangeFeedGone, VacuumRefused
    from ttl.store import write

    # One file per row: removing k0 then removes a whole file, which VACUUM can delete (in a
    # file shared with k1 a deletion vector would mark it, and the file would stay).
    monkeypatch.setattr(write, "ROWS_PER_TASK", 1)
    store = make_store(spark, table_path)
    store.apply_records(recs((b"k0", b"v", NOW), (b"k1", b"v", NOW)),
                        metadata={"input_offsets": {"0": 2}})
    pub = publisher(spark, store, kconf, kafka)
    pub.publish()
    store.apply_records(recs((b"k0", None, NOW + 1), (b"k2", b"v", NOW + 1)),
                        metadata={"input_offsets": {"0": 4}})
    store.apply_records(recs((b"k3", b"v", NOW + 2)), metadata={"input_offsets": {"0": 5}})
    store.wall_clock.set(int(time.time() * 1000) + 3 * 3_600_000)  # version 2 is 3 h old
    with pytest.raises(VacuumRefused, match="skipped: version 2 is not yet on the changelog"):
        eviction.vacuum(store, 3_600_000, 0, published=pub.progress.version)
    store.wall_clock.set(NOW)
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    spark.sql(f"VACUUM delta.`{table_path}` RETAIN 0 HOURS")  # an operator's manual VACUUM
    latest = delta_log.latest_version(spark, table_path)
    with pytest.raises(ChangeFeedGone, match=rf"versions 2\.\.{latest} .* is gone") as gone:
        pub.publish()
    assert "ttl publish --reseed" in gone.value.operator_message()
    assert pub.progress.version == 1                                 # nothing half-done
    result = pub.reseed()
    assert (result.puts, result.tombstones, result.published_version) == (3, 1, latest)
    assert pub.progress.input_offsets == {"0": 5}
    store.apply_records(recs((b"k4", b"v", NOW + 3)))                # publication goes on
    assert pub.publish().records == 1
    pub.close()
    msgs = read_changelog(kafka, kconf, 2 + 4 + 1)
    assert rebuilt_with_ts(msgs) == as_rebuilt(table_state(spark, table_path))
    assert read_progress(clients(kconf, kafka), topic.progress_topic(
        kconf.changelog_topic)).version == latest + 1


def test_vacuum_is_guarded_by_the_publishers_measured_position(spark, table_path):
    """Reliability 12: VACUUM runs when everything is published or the oldest unpublished
    commit is young enough, and is refused (naming the version) when it could remove
    change data not yet published, or when the position is unknown."""
    import time

    from ttl import delta_log, eviction
    from ttl.errors import VacuumRefused

    store = make_store(spark, table_path)
    store.apply_records(recs((b"a", b"v", NOW)))
    store.apply_records(recs((b"b", b"v", NOW)))
    latest = delta_log.latest_version(spark, table_path)
    store.wall_clock.set(int(time.time() * 1000) + 2 * 3_600_000)
    with pytest.raises(VacuumRefused, match=f"version {latest} is not yet on the changelog"):
        eviction.vacuum(store, 3_600_000, 0, published=latest - 1)
    with pytest.raises(VacuumRefused, match="position is unknown"):
        eviction.vacuum(store, 3_600_000, 0, published=None)
    eviction.vacuum(store, 3_600_000, 0, published=latest)           # all published: runs
    store.wall_clock.set(int(time.time() * 1000))
    eviction.vacuum(store, 3_600_000, 0, published=latest - 1)       # young enough: runs
    end = delta_log.latest_version(spark, table_path)                # then its record
    assert [delta_log.commit_info(spark, table_path, v).operation
            for v in (end - 1, end)] == ["VACUUM END", "SET TBLPROPERTIES"]


def test_a_null_header_written_by_an_operators_sql_is_left_out_not_fatal(
        spark, kafka, kconf, table_path, caplog):
    """Issue 31, scenario 8: an operator's UPDATE writes a null element and a header with a
    null key into a stored entry's headers. Publication and a re-seed used to fail on it
    (ValueError) for good; now they publish the entry without those two headers, keep a
    header with a null value (Kafka's own), and warn naming the key and version."""
    store = make_store(spark, table_path)
    store.apply_records([InputRecord(b"a", b"a1", NOW, (("h", b"1"),), 0, 0),
                         InputRecord(b"b", b"b1", NOW, (), 0, 1)])
    header = "STRUCT<key: STRING, value: BINARY>"
    retrying(lambda: spark.sql(
        f"UPDATE delta.`{table_path}` SET headers = array(named_struct('key', 'h', 'value', "
        f"X'31'), CAST(NULL AS {header}), named_struct('key', CAST(NULL AS STRING), "
        "'value', X'78'), named_struct('key', 'n', 'value', CAST(NULL AS BINARY))) "
        "WHERE key = X'61'"))
    pub = publisher(spark, store, kconf, kafka)
    with caplog.at_level("WARNING", logger="ttl.changelog.format"):
        assert (pub.publish().puts, pub.reseed().puts) == (3, 2)
    pub.close()
    msgs = read_changelog(kafka, kconf, 5)
    a_puts = [m for m in msgs if m.key() == b"a"]
    assert [user(m) for m in a_puts] == [[("h", b"1")], [("h", b"1"), ("n", None)],
                                         [("h", b"1"), ("n", None)]]
    versions = [engine(m)["ttl.version"].decode() for m in a_puts]
    assert versions[:2] == ["1", "2"]
    warned = [r.getMessage() for r in caplog.records if "leave out headers" in r.getMessage()]
    assert [w.split(":")[0] for w in warned] == [f"changelog version {v}" for v in
                                                 versions[1:]], warned
    assert all(w.endswith("keys (headers left out): b'a' (2)") for w in warned), warned


def _partition_job(kafka, kconf, end: int, partitions: int = 3) -> partitioned.Job:
    return partitioned.Job(
        client={"bootstrap.servers": kafka.bootstrap_servers},
        producer=partitioned.producer_settings(60_000, 1_000_000),
        topic=kconf.changelog_topic, progress_topic=topic.progress_topic(kconf.changelog_topic),
        store="s", partitions=partitions, offset=0, end=end,
        versions={v: partitioned.VersionFacts(NOW) for v in range(end + 1)},
        max_records_per_transaction=1_000, commit_timeout_s=30, now_ms=NOW)


def _partition_runs(partition: int, versions: dict[int, list[bytes]], n: int = 3) -> list:
    """Each version's puts of ``keys`` (all in changelog partition ``partition``)."""
    import pyarrow as pa

    from ttl.store.layout import headers_arrow_type

    runs = []
    for version, keys in versions.items():
        assert all(partition_of(k, n) == partition for k in keys)
        runs.append((version, pa.RecordBatch.from_pydict({
            "_commit_version": [version] * len(keys), "key": keys,
            "value": [b"v%d" % version] * len(keys), "ts": [NOW] * len(keys),
            "headers": pa.array([[]] * len(keys), headers_arrow_type()),
            "record_ttl": pa.array([None] * len(keys), pa.int64()),
            "present": [1] * len(keys)})))
    return runs


def _keys_of(partition: int, count: int, n: int = 3) -> list[bytes]:
    return [k for k in (f"key-{i}".encode() for i in range(200))
            if partition_of(k, n) == partition][:count]


def test_a_partitions_publication_is_a_compare_and_set_on_its_progress(kafka, kconf):
    """Publication from the executors: a partition's producer reads the progress after
    fencing, so publishing what the partition already holds (a task run again, a batch
    published again after a crash before the driver's progress record) publishes nothing,
    and a longer range publishes only the versions after it."""
    keys = _keys_of(1, 4)
    runs = _partition_runs(1, {0: keys[:2], 1: keys[2:]})
    first = partitioned.publish_partition(1, runs, _partition_job(kafka, kconf, end=1))
    assert (first["records"], first["skipped"]) == (4, 0)
    again = partitioned.publish_partition(1, runs, _partition_job(kafka, kconf, end=1))
    assert (again["records"], again["skipped"]) == (0, 4)
    progress = read_progress(clients(kconf, kafka), topic.progress_topic(kconf.changelog_topic))
    assert (progress.version, progress.ahead, progress.highest) == (-1, {1: 1}, 1)
    assert progress.partition_version(1) == 1 and progress.partition_version(0) == -1
    more = _partition_runs(1, {1: keys[2:], 2: keys[:1]})
    later = partitioned.publish_partition(1, more, _partition_job(kafka, kconf, end=2))
    assert (later["records"], later["skipped"]) == (1, 2)
    msgs = read_changelog(kafka, kconf, 5)
    assert {m.partition() for m in msgs} == {1}
    assert [engine(m)["ttl.version"] for m in msgs] == [b"0", b"0", b"1", b"1", b"2"]


def test_a_late_partition_publication_sees_a_newer_one_behind_an_open_transaction(
        kafka, kconf):
    """A former lease holder's task that reaches a partition late must not send its older
    versions after a newer publication's, even when its read of the progress topic stops
    short of the newer progress record (a ``read_committed`` reader stops at the first
    transaction still open there: another partition's, seconds long): the partition's own
    last records, read after fencing it, say what it holds."""
    from confluent_kafka import Producer

    from ttl.changelog.progress import partition_key, partition_record

    key = _keys_of(1, 1)[0]
    progress_name = topic.progress_topic(kconf.changelog_topic)
    blocker = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                        "transactional.id": f"t-{uuid.uuid4().hex}",
                        "transaction.timeout.ms": 600_000})  # open for the whole test
    blocker.init_transactions(30)
    blocker.begin_transaction()  # another partition's, open throughout
    blocker.produce(progress_name, key=partition_key(0), value=partition_record("s", 0, 0, NOW))
    blocker.flush(10)
    try:
        newer = partitioned.publish_partition(1, _partition_runs(1, {0: [key], 2: [key]}),
                                              _partition_job(kafka, kconf, end=2))
        assert newer["records"] == 2
        # the progress topic alone does not show it: the read stops at the open transaction
        assert read_progress(clients(kconf, kafka), progress_name).partition_version(1) == -1
        stale = partitioned.publish_partition(1, _partition_runs(1, {0: [key]}),
                                              _partition_job(kafka, kconf, end=0))
        assert (stale["records"], stale["skipped"]) == (0, 1)
    finally:
        blocker.abort_transaction(10)
    msgs = read_changelog(kafka, kconf, 2)
    assert [(m.value(), engine(m)["ttl.version"]) for m in msgs] == [(b"v0", b"0"),
                                                                      (b"v2", b"2")]


def test_a_version_left_in_part_in_a_partition_is_sent_again_whole(kafka, kconf):
    """A version too large for one transaction spans several; a crash between them leaves
    part of it in the partition with no progress record. The next publication must not
    take the partition's last record for the whole version: it sends the version again,
    whole, after its part."""
    from confluent_kafka import Producer

    from ttl.names import partition_transactional_id

    keys = _keys_of(1, 2)
    crashed = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                        "transactional.id": partition_transactional_id("s", 1)})
    crashed.init_transactions(30)
    crashed.begin_transaction()
    crashed.produce(kconf.changelog_topic, key=keys[0], value=b"v0", partition=1,
                    headers=[("ttl.op", b"put"), ("ttl.version", b"0")])
    crashed.commit_transaction(30)
    again = partitioned.publish_partition(1, _partition_runs(1, {0: keys}),
                                          _partition_job(kafka, kconf, end=0))
    assert (again["records"], again["skipped"]) == (2, 0)
    msgs = read_changelog(kafka, kconf, 3)
    assert [m.key() for m in msgs] == [keys[0], *keys]


def test_a_partitions_producer_fences_an_older_one_of_that_partition(kafka, kconf):
    """A zombie's producer of a partition (a failed task attempt, a driver that lost the
    store) is fenced by the next one: its open transaction is aborted, unseen, and its
    commit fails."""
    from confluent_kafka import KafkaException, Producer

    from ttl.names import partition_transactional_id

    zombie = Producer({"bootstrap.servers": kafka.bootstrap_servers,
                       "transactional.id": partition_transactional_id("s", 2)})
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(kconf.changelog_topic, key=b"stale", value=b"old", partition=2)
    zombie.flush(10)
    keys = _keys_of(2, 2)
    done = partitioned.publish_partition(2, _partition_runs(2, {0: keys}),
                                         _partition_job(kafka, kconf, end=0))
    assert done["records"] == 2
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    msgs = read_changelog(kafka, kconf, 2)
    assert sorted(m.key() for m in msgs) == sorted(keys)


def test_a_partitions_share_over_a_transaction_commits_its_progress_at_each_version(
        kafka, kconf):
    """A partition's share larger than a transaction spans transactions, each with the
    partition's progress up to the last version it completes: a task run again after one
    of them starts after it, never sending an older version after a newer one."""
    keys = _keys_of(0, 5)
    runs = _partition_runs(0, {0: keys[:2], 1: keys[2:4], 2: keys[4:]})
    job = _partition_job(kafka, kconf, end=2)
    job = partitioned.Job(**{**job.__dict__, "max_records_per_transaction": 2})
    assert partitioned.publish_partition(0, runs, job)["records"] == 5
    marks = consume_all(kafka.bootstrap_servers, topic.progress_topic(kconf.changelog_topic), 3)
    assert [json.loads(m.value())["version"] for m in marks] == [0, 1, 2]


@pytest.mark.parametrize("publish_from", ["executors", "driver"])
def test_publication_from_the_executors_resumes_where_each_partition_stopped(
        spark, kafka, kconf, table_path, publish_from):
    """A crash after some partitions published a version and before the driver's progress
    record: the next publication gives those partitions nothing again, the others their
    records, and the driver's record then covers every partition (a publisher from the
    driver too: it computes each key's partition while some are ahead)."""
    store = make_store(spark, table_path)
    keys = [f"key-{i}".encode() for i in range(30)]
    store.apply_records([InputRecord(k, b"v", NOW, (), 0, i) for i, k in enumerate(keys)])
    mine = [k for k in keys if partition_of(k, 3) == 0]
    partitioned.publish_partition(0, _partition_runs(0, {1: mine}),
                                  _partition_job(kafka, kconf, end=1))
    pub = publisher(spark, store, kconf, kafka, publish_from=publish_from)
    assert pub.progress.ahead == {0: 1}
    result = pub.publish()
    assert result.records == len(keys) - len(mine)
    progress = read_progress(clients(kconf, kafka), topic.progress_topic(kconf.changelog_topic))
    assert (progress.version, progress.ahead) == (1, {})
    msgs = read_changelog(kafka, kconf, len(keys))
    assert sorted(m.key() for m in msgs) == sorted(keys)
