"""Benchmark: changelog publication throughput and commit-to-Kafka lag (prints figures).

    .venv/bin/python -m tests.bench.changelog_bench --changes 1000000
    .venv/bin/python -m tests.bench.changelog_bench --changes 100000 --rounds 10 --batch 500

Starts a local Kafka broker, creates the changelog topics (3 partitions), bulk-loads
``--changes`` rows into a store table in one Delta commit and times ``Publisher.publish()``
over it (records/s). The two halves are then timed apart: reading the change feed (the
same query as ``Publisher._changes``, drained in Arrow batches, plus building the
changelog records) and producing the same number of similar records in one transaction
with the publisher's producer settings.

Then the stream's own path: ``--known-rounds`` batches of ``--known`` new keys (100-byte
values, 2 headers) applied with ``keep_changes`` and published from their own rows
(``Publisher.publish_known``, no read back) ``[1c]``; then ``publish()`` of a second bulk
version of ``--changes`` rows ``[1d]``, on a JVM the first one warmed up.

Then a steady update load: ``--rounds`` rounds of ``--batch`` updates of loaded keys through
``DeltaStore.apply_records``, each followed by ``publish()``. Lag per round is measured two
ways: from the Delta commit timestamp (``history`` ``timestamp``, i.e. the commit file's
time) and from the moment ``apply_records`` returned, both to when ``publish()`` returned.
"""

from __future__ import annotations

import argparse
import gc
import random
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from tests.bench.machine import machine_facts
from tests.support import bulk_load
from ttl.changelog import format as fmt
from ttl.changelog import topic
from ttl.changelog.publisher import Publisher
from ttl.clock import FixedClock
from ttl.config import ChangelogConfig, KafkaConfig, StoreConfig
from ttl.kafka import KafkaClients
from ttl.local.kafka import LocalKafka
from ttl.record import InputRecord
from ttl.spark import get_session
from ttl.store import DeltaStore

NOW = 1_700_000_000_000
VALUE = bytes(range(100))
HEADERS = (("source", b"bench"), ("trace", b"0123456789abcdef"))


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _commit_ms(spark, path: str) -> tuple[int, int]:
    from delta.tables import DeltaTable

    row = (DeltaTable.forPath(spark, path).history(1)
           .selectExpr("version", "unix_millis(timestamp) AS ms").first())
    return row["version"], row["ms"]


def time_feed_read(pub: Publisher, start: int, end: int) -> tuple[int, float, float]:
    """Drain the publisher's change-feed query; (rows, total s, s spent building records)."""
    started = time.monotonic()
    building = 0.0
    rows = 0
    for version, run in pub._changes(start, end):
        t = time.perf_counter()
        rows += sum(1 for _ in fmt.records(run, version, None, lambda key: ("delete", None)))
        building += time.perf_counter() - t
    return rows, time.monotonic() - started, building


def time_produce(kconf: KafkaConfig, bootstrap: str, n: int) -> float:
    """Produce ``n`` records shaped like the changelog's, in one transaction; seconds."""
    from confluent_kafka import Producer

    scratch = f"bench-produce-{uuid.uuid4().hex[:6]}"
    topic.create(KafkaClients(kconf.model_copy(update={"changelog_topic": scratch}), bootstrap),
                 ChangelogConfig())
    producer = Producer({
        **KafkaClients(kconf, bootstrap).client_config(), "transactional.id": f"bench-{scratch}",
        "partitioner": "murmur2_random", "acks": "all", "linger.ms": 20,
        "compression.type": "lz4", "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "transaction.timeout.ms": 300_000,
        "log_level": 3,
    })
    producer.init_transactions(60)
    started = time.monotonic()
    producer.begin_transaction()
    for i in range(n):
        headers = [("ttl.ts", b"1700000000000"), ("ttl.op", b"put"), ("ttl.version", b"1"),
                   ("ttl.stream-time", b"none")]
        while True:
            try:
                producer.produce(scratch, key=b"k%d" % i, value=b"value-%d" % i,
                                 headers=headers)
                break
            except BufferError:
                producer.poll(0.05)
    producer.commit_transaction(300)
    elapsed = time.monotonic() - started
    del producer  # closed before the broker stops
    return elapsed


def run(args) -> None:
    spark = get_session()
    machine_facts(spark)
    work = Path(tempfile.mkdtemp(prefix="ttl-clbench-"))
    try:
        with LocalKafka() as k:
            bootstrap = k.bootstrap_servers
            print(f"kafka up in {k.startup_seconds:.1f} s at {bootstrap}", flush=True)
            name = f"bench-{uuid.uuid4().hex[:6]}"
            kconf = KafkaConfig(bootstrap_servers=bootstrap, input_topic=f"{name}-in",
                                changelog_topic=name, changelog_partitions=3)
            topic.create(KafkaClients(kconf, bootstrap), ChangelogConfig())
            conf = StoreConfig(name="bench", path=str(work / "store"), ttl=None)
            store = DeltaStore(spark, conf, wall_clock=FixedClock(NOW))

            started = time.monotonic()
            bulk_load(spark, conf.path, args.changes, NOW, None)
            print(f"bulk_load {args.changes:,} rows: {time.monotonic() - started:.1f} s",
                  flush=True)

            # 1. publication throughput
            pub = Publisher(spark, conf.path, conf.name, KafkaClients(kconf, bootstrap),
                            ChangelogConfig())
            result = pub.publish()
            print(f"[1] publish(): versions 0..{result.published_version}, "
                  f"{result.records:,} records ({result.puts:,} puts, "
                  f"{result.tombstones:,} tombstones) in {result.seconds:.1f} s = "
                  f"{result.records / result.seconds:,.0f} records/s", flush=True)
            assert result.records == args.changes, result
            rows, feed_s, build_s = time_feed_read(pub, 0, result.published_version)
            print(f"[1a] change feed read (same query, Arrow batches, +records): {rows:,} "
                  f"rows in {feed_s:.1f} s = {rows / feed_s:,.0f} rows/s "
                  f"(of which building records {build_s:.1f} s)", flush=True)
            produce_s = time_produce(kconf, bootstrap, args.changes)
            print(f"[1b] produce only (same producer settings, 1 txn): {args.changes:,} "
                  f"records in {produce_s:.1f} s = {args.changes / produce_s:,.0f} records/s",
                  flush=True)

            # 1c. the stream's own path: a batch published from the rows it wrote
            known = []
            for rnd in range(args.known_rounds):
                records = [InputRecord(b"new-%d-%d" % (rnd, i), VALUE, NOW + i, HEADERS, 0,
                                       rnd * args.known + i) for i in range(args.known)]
                wr = store.apply_records(records, keep_changes=True)
                assert wr.changes is not None, wr
                r = pub.publish_known(wr.version, wr.changes)
                assert r.records == args.known and r.published_version == wr.version, r
                known.append(r.seconds)
                print(f"  publish_known round {rnd}: {r.records:,} records in "
                      f"{r.seconds:.2f} s = {r.records / r.seconds:,.0f} records/s", flush=True)
            if known:
                med = statistics.median(known)
                print(f"[1c] publish_known (a batch's own rows, 100-byte values, 2 headers): "
                      f"median {med:.2f} s = {args.known / med:,.0f} records/s", flush=True)

            # 1d. the same again on a warm JVM (the first change-feed read of a process pays
            # its warm-up): a second bulk version of as many new keys
            bulk_load(spark, conf.path, args.changes, NOW, None, prefix="warm-")
            warm = pub.publish()
            assert warm.records == args.changes, warm
            print(f"[1d] publish() again (warm JVM): {warm.records:,} records in "
                  f"{warm.seconds:.1f} s = {warm.records / warm.seconds:,.0f} records/s",
                  flush=True)

            # 2. commit-to-Kafka lag under a steady update load
            rng = random.Random(1)
            lag_commit, lag_wall, pub_s, apply_s = [], [], [], []
            for rnd in range(args.rounds):
                ids = rng.sample(range(args.changes), args.batch)
                records = [InputRecord(b"k%d" % key_id, b"r%d-%d" % (rnd, i), NOW, (), 0,
                                       rnd * args.batch + i)
                           for i, key_id in enumerate(ids)]
                t0 = time.monotonic()
                wr = store.apply_records(records)
                applied_wall = time.time()
                apply_s.append(time.monotonic() - t0)
                r = pub.publish()
                returned = time.time()
                version, commit_ms = _commit_ms(spark, conf.path)  # nothing else writes
                pub_s.append(r.seconds)
                lag_commit.append(returned * 1000 - commit_ms)
                lag_wall.append((returned - applied_wall) * 1000)
                assert r.published_version == version == wr.version, (r, version, wr.version)
                assert r.records == args.batch, r
                print(f"  round {rnd}: v{version} apply {apply_s[-1]:.2f} s, "
                      f"publish {r.seconds:.2f} s ({r.records} records), "
                      f"lag {lag_commit[-1]:.0f} ms from commit ts, "
                      f"{lag_wall[-1]:.0f} ms from apply return", flush=True)
            for label, values in (("lag from Delta commit timestamp (history)", lag_commit),
                                  ("lag from apply_records return (wall)", lag_wall)):
                print(f"[2] {label}: p50 {_pct(values, .5):.0f} ms, "
                      f"p99 {_pct(values, .99):.0f} ms, max {max(values):.0f} ms")
            print(f"[2] publish() per round: median {statistics.median(pub_s):.2f} s, "
                  f"min {min(pub_s):.2f} s, max {max(pub_s):.2f} s; apply_records median "
                  f"{statistics.median(apply_s):.2f} s", flush=True)
            pub.close()
            del pub
            gc.collect()
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--known", type=int, default=100_000,
                        help="records per publish_known round (a batch of new keys)")
    parser.add_argument("--known-rounds", type=int, default=3)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
