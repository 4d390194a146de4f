"""Benchmark: what a changelog partition's task on the executors reads before it publishes
(prints figures; no Spark).

    .venv/bin/python -m tests.bench.partition_reads
    .venv/bin/python -m tests.bench.partition_reads --versions 200 --records 1000 --runs 30

Starts a local Kafka broker, publishes ``--versions`` transactions of ``--records`` records
each to one partition of a changelog topic (with the ``ttl.version`` header and a
``progress/<p>`` record, as a partition's task does), then times, on fresh
``read_committed`` consumers as a task makes them: the read of the progress topic
(``read_progress_with``), the read of the partition's last records
(``partitioned.last_published``) and the two one after the other, each with the broker's
default fetch wait (``fetch.wait.max.ms`` 500 ms) and with ``watermarks.READS_TO_END``.
Median and largest of ``--runs`` reads each.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ttl.changelog import partitioned
from ttl.changelog.progress import partition_key, partition_record, read_progress_with
from ttl.local.kafka import LocalKafka
from ttl.names import HEADER_VERSION
from ttl.watermarks import READS_TO_END

PARTITION = 1


def _fill(bootstrap: str, changelog: str, progress: str, versions: int, records: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap,
                         "transactional.id": f"bench-{uuid.uuid4().hex}"})
    producer.init_transactions(30)
    for version in range(versions):
        producer.begin_transaction()
        for i in range(records):
            producer.produce(changelog, key=b"k%d" % i, value=b"v", partition=PARTITION,
                             headers=[(HEADER_VERSION, str(version).encode())])
        producer.produce(progress, key=partition_key(PARTITION),
                         value=partition_record("bench", PARTITION, version, 0))
        producer.commit_transaction(30)


def _time(bootstrap: str, extra: dict, read, runs: int) -> tuple[float, float, object]:
    took, answer = [], None
    for _ in range(runs):
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                             "enable.auto.commit": False, "isolation.level": "read_committed",
                             "enable.partition.eof": True, "log_level": 3, **extra})
        started = time.perf_counter()
        answer = read(consumer)
        took.append(time.perf_counter() - started)
        consumer.close()
    return statistics.median(took), max(took), answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--versions", type=int, default=50)
    parser.add_argument("--records", type=int, default=1000, help="per version")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with LocalKafka() as kafka:
        bootstrap = kafka.bootstrap_servers
        changelog = f"bench-{uuid.uuid4().hex[:6]}"
        progress = f"{changelog}-progress"
        admin = AdminClient({"bootstrap.servers": bootstrap})  # kept until they exist
        created = admin.create_topics([NewTopic(changelog, 3, 1), NewTopic(progress, 1, 1)])
        for future in created.values():
            future.result()
        _fill(bootstrap, changelog, progress, args.versions, args.records)
        reads = {
            "progress topic": lambda c: read_progress_with(c, progress).partition_version(
                PARTITION),
            "partition's last records": lambda c: partitioned.last_published(
                c, changelog, PARTITION),
            "both, one consumer": lambda c: (
                read_progress_with(c, progress).partition_version(PARTITION),
                partitioned.last_published(c, changelog, PARTITION)),
        }
        print(f"{args.versions} versions of {args.records} records; median / largest of "
              f"{args.runs} reads on fresh consumers")
        for what, read in reads.items():
            for label, extra in (("default fetch wait", {}), ("READS_TO_END", READS_TO_END)):
                median, largest, answer = _time(bootstrap, extra, read, args.runs)
                print(f"  {what:26s} {label:19s} {1000 * median:7.1f} ms  "
                      f"{1000 * largest:7.1f} ms  (found {answer})", flush=True)


if __name__ == "__main__":
    main()
