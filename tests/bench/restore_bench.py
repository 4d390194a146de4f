"""Benchmark: restore throughput from the changelog against two read ceilings (prints figures).

    .venv/bin/python -m tests.bench.restore_bench                       # 2M records, 200k keys
    .venv/bin/python -m tests.bench.restore_bench --records 500000 --keys 50000
    .venv/bin/python -m tests.bench.restore_bench --records 10000000 --keys 1000000  # opt-in

Starts a local Kafka broker and creates the changelog topics with ``topic.create``
(2 partitions). Then:

1. **Build** a changelog of ``--records`` records over ``--keys`` keys with a transactional
   producer (``murmur2_random``, as the publisher does) in the engine's record format
   (``format.put`` / ``format.tombstone``; ``--tombstones`` of them are deletes, a few puts
   carry a per-record TTL), one transaction per ``--txn`` records, each transaction one
   ``ttl.version``. The expected final state (live keys) is tracked on the side.
2. **Ceiling 1**: drain the same topic with a plain ``confluent_kafka.Consumer``
   (``read_committed``, from the beginning to the end offsets), records/s.
3. **Restore**: ``restore(spark, conf, kafka, target)`` into a fresh temp path: records
   read, keys restored (checked against the expected live keys), seconds, records/s and the
   ratio to each ceiling, with the restore's phases; then once more into another table
   (the first restore of a process also pays the JVM's warm-up). **Ceiling 2**: a
   Spark-only bounded batch read of the topic
   (``spark.read.format('kafka')`` ... ``.count()``), same isolation level.

Compaction cannot interfere: the topic's ``min.compaction.lag.ms`` is an hour.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from tests.bench.machine import load as _load
from tests.bench.machine import machine_facts
from ttl.changelog import format as fmt
from ttl.changelog import topic
from ttl.config import from_dict
from ttl.kafka import KafkaClients
from ttl.local.kafka import LocalKafka
from ttl.spark import get_session

NOW = 1_700_000_000_000


def build_changelog(conf, bootstrap: str, records: int, keys: int, tombstones: float,
                    txn: int, seed: int) -> tuple[int, int, float]:
    """Produce the changelog; returns (live keys expected, tombstones produced, seconds)."""
    from confluent_kafka import Producer

    name = conf.kafka.changelog_topic
    producer = Producer({
        **KafkaClients(conf.kafka, bootstrap).client_config(), "transactional.id": f"bench-{name}",
        "partitioner": "murmur2_random", "acks": "all", "linger.ms": 20,
        "enable.idempotence": True, "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "transaction.timeout.ms": 300_000, "log_level": 3,
    })
    producer.init_transactions(60)
    rng = random.Random(seed)
    live: dict[int, bool] = {}
    dead = 0
    started = time.monotonic()
    version = 0
    for first in range(0, records, txn):
        version += 1
        stream_time = NOW + first
        producer.begin_transaction()
        for i in range(first, min(records, first + txn)):
            k = rng.randrange(keys)
            key = b"key-%09d" % k
            if rng.random() < tombstones:
                rec = fmt.tombstone(key, "delete" if i % 2 else "expire", version, stream_time)
                live[k] = False
                dead += 1
            else:
                ttl = 3_600_000 if i % 20 == 0 else None
                rec = fmt.put(key, b"value-%d-" % i + b"x" * 48, NOW + i, (("src", b"bench"),),
                              version, stream_time, ttl)
                live[k] = True
            while True:
                try:
                    producer.produce(name, key=rec.key, value=rec.value,
                                     headers=list(rec.headers))
                    break
                except BufferError:
                    producer.poll(0.05)
            if i % 10_000 == 0:
                producer.poll(0)
        producer.commit_transaction(300)
    elapsed = time.monotonic() - started
    producer.flush(30)
    del producer
    return sum(live.values()), dead, elapsed


def raw_consume(conf, bootstrap: str) -> tuple[int, float, dict[int, int]]:
    """Drain the topic with a plain Consumer (read_committed) up to the end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    from ttl.changelog.reader import end_offsets

    name = conf.kafka.changelog_topic
    ends = end_offsets(KafkaClients(conf.kafka, bootstrap), name)
    consumer = Consumer({**KafkaClients(conf.kafka, bootstrap).client_config(), "log_level": 3,
                         "group.id": f"bench-{uuid.uuid4()}", "enable.auto.commit": False,
                         "isolation.level": "read_committed", "enable.partition.eof": True,
                         "fetch.max.bytes": 52_428_800,
                         "max.partition.fetch.bytes": 10_485_760})
    started = time.monotonic()
    consumer.assign([TopicPartition(name, p, -2) for p in ends])  # OFFSET_BEGINNING
    pending = {p for p, end in ends.items() if end > 0}
    n = 0
    try:
        while pending:
            for msg in consumer.consume(10_000, 1.0):
                err = msg.error()
                if err is not None:
                    if err.code() == -191:  # _PARTITION_EOF: at the last stable offset
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(err)
                n += 1
                msg.headers()  # touch what a converter would read
                if msg.offset() >= ends[msg.partition()] - 1:
                    pending.discard(msg.partition())
            if time.monotonic() - started > 1800:
                raise RuntimeError(f"raw consume stuck, pending partitions {pending}")
    finally:
        elapsed = time.monotonic() - started
        consumer.close()
    return n, elapsed, ends


def spark_count(spark, conf, bootstrap: str, ends: dict[int, int]) -> tuple[int, float]:
    """Spark-only bounded batch read of the topic (same options as restore), count()."""
    name = conf.kafka.changelog_topic
    started = time.monotonic()
    n = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", name).option("includeHeaders", "true")
         .option("startingOffsets", json.dumps({name: {str(p): -2 for p in ends}}))
         .option("endingOffsets", json.dumps({name: {str(p): o for p, o in ends.items()}}))
         .option("kafka.isolation.level", "read_committed").load().count())
    return n, time.monotonic() - started


def _phases(result) -> str:
    phases = getattr(result, "phases_s", {})
    return ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) or "(not recorded)"


def run(args) -> None:
    from ttl.restore import restore

    logging.basicConfig(level=logging.WARNING,
                        format="  %(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("ttl.restore").setLevel(logging.INFO)  # phase transitions, timed
    spark = get_session()
    machine_facts(spark)
    work = Path(tempfile.mkdtemp(prefix="ttl-rsbench-"))
    try:
        with LocalKafka() as k:
            bootstrap = k.bootstrap_servers
            print(f"kafka up in {k.startup_seconds:.1f} s at {bootstrap}", flush=True)
            name = f"rsb-{uuid.uuid4().hex[:6]}"
            conf = from_dict({
                "store": {"name": name, "path": str(work / "store"), "ttl": args.ttl},
                "kafka": {"bootstrap_servers": bootstrap, "input_topic": f"{name}-in",
                          "changelog_topic": name, "changelog_partitions": 2},
                "stream": {"checkpoint": str(work / "ckpt")},
            })
            topic.create(KafkaClients(conf.kafka, bootstrap), conf.changelog)

            live, dead, produce_s = build_changelog(conf, bootstrap, args.records, args.keys,
                                                    args.tombstones, args.txn, args.seed)
            print(f"[1] produced {args.records:,} records ({dead:,} tombstones) over "
                  f"{args.keys:,} keys in {-(-args.records // args.txn)} transactions: "
                  f"{produce_s:.1f} s = {args.records / produce_s:,.0f} records/s; "
                  f"expected live keys {live:,}", flush=True)

            raw_n, raw_s, ends = raw_consume(conf, bootstrap)
            raw_rate = raw_n / raw_s
            print(f"[2] ceiling 1, raw Consumer (read_committed): {raw_n:,} records in "
                  f"{raw_s:.1f} s = {raw_rate:,.0f} records/s (end offsets {ends})",
                  flush=True)

            target = str(work / "restored")
            result = restore(spark, conf, KafkaClients(conf.kafka, bootstrap), target)
            print(f"[3] restore: {result.records_read:,} records read, "
                  f"{result.keys_restored:,} keys restored (expected {live:,}"
                  f"{'' if result.keys_restored == live else ' MISMATCH'}), "
                  f"{result.seconds:.1f} s = {result.rate:,.0f} records/s = "
                  f"{result.rate / raw_rate:.2f}x ceiling 1; version {result.version}, "
                  f"last ttl.version {result.last_version}", flush=True)

            print(f"    phases: {_phases(result)}", flush=True)
            # The first restore of a process also pays the JVM's warm-up of the Kafka
            # source, the aggregate's code and Delta (seconds, whatever the topic's size);
            # a second one into another table shows the restore itself.
            again = restore(spark, conf, KafkaClients(conf.kafka, bootstrap),
                            str(work / "restored-again"))
            print(f"[3c] restore again in the same process (warm): {again.seconds:.1f} s = "
                  f"{again.rate:,.0f} records/s = {again.rate / raw_rate:.2f}x ceiling 1; "
                  f"phases: {_phases(again)}", flush=True)

            spark_n, spark_s = spark_count(spark, conf, bootstrap, ends)
            spark_rate = spark_n / spark_s
            print(f"[3b] ceiling 2, Spark bounded kafka read .count(): {spark_n:,} records "
                  f"in {spark_s:.1f} s = {spark_rate:,.0f} records/s; restore is "
                  f"{result.rate / spark_rate:.2f}x of it", flush=True)
            if not (raw_n == spark_n == result.records_read == args.records):
                print(f"WARNING: record counts differ: produced {args.records:,}, raw {raw_n:,}"
                      f", spark {spark_n:,}, restore {result.records_read:,}")
            gc.collect()
    finally:
        print(f"machine at end: loadavg={_load()}", flush=True)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--tombstones", type=float, default=0.03,
                        help="fraction of records that are tombstones")
    parser.add_argument("--txn", type=int, default=200_000,
                        help="records per producer transaction (one ttl.version each)")
    parser.add_argument("--ttl", default="7d", help="the store's TTL")
    parser.add_argument("--seed", type=int, default=7)
    run(parser.parse_args())


if __name__ == "__main__":
    main()
