"""The smoke run behind the README's first command, until the streaming job lands.

Start the local broker, write sample records (headers, a tombstone) to a topic, read them
back through Spark's Kafka source in a bounded batch, MERGE them into a Delta table with the
change feed on, print what happened, stop everything.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from ttl.kafka_local import LocalKafka
from ttl.spark import get_session

log = logging.getLogger(__name__)


def sample_records(n: int) -> list[tuple[bytes, bytes | None, list[tuple[str, bytes | None]]]]:
    records = []
    for i in range(n):
        key = f"user-{i % max(1, n // 2)}".encode()
        value = None if i % 7 == 6 else f"v{i}".encode()
        headers = [("source", b"demo"), ("seq", str(i).encode()), ("note", None)]
        records.append((key, value, headers))
    return records


def run(data_dir: Path, n: int = 20) -> dict[str, int]:
    """Returns the summary it prints (counts), so a test can assert on it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    table = str((data_dir / "demo_table").resolve())
    with LocalKafka() as kafka:
        admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
        admin.create_topics([NewTopic("demo-input", 1, 1)])["demo-input"].result()
        producer = Producer({"bootstrap.servers": kafka.bootstrap_servers})
        for key, value, headers in sample_records(n):
            producer.produce("demo-input", key=key, value=value, headers=headers)
        producer.flush(30)

        spark = get_session()
        started = time.monotonic()
        batch = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap_servers)
            .option("subscribe", "demo-input")
            .option("includeHeaders", "true")
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        batch.createOrReplaceTempView("demo_batch")
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.`{table}` (key BINARY NOT NULL, value BINARY, "
            "headers ARRAY<STRUCT<key: STRING, value: BINARY>>, kafka_offset BIGINT) USING delta "
            "TBLPROPERTIES ('delta.enableChangeDataFeed'='true', "
            "'delta.enableDeletionVectors'='true')"
        )
        # The last record per key wins (offset order); tombstones delete.
        spark.sql(
            f"""
            MERGE INTO delta.`{table}` t
            USING (SELECT key, value, headers, offset FROM (
                     SELECT *, row_number() OVER (PARTITION BY key ORDER BY offset DESC) rn
                     FROM demo_batch) WHERE rn = 1) s
            ON t.key = s.key
            WHEN MATCHED AND s.value IS NULL THEN DELETE
            WHEN MATCHED THEN UPDATE SET value = s.value, headers = s.headers,
                                         kafka_offset = s.offset
            WHEN NOT MATCHED AND s.value IS NOT NULL THEN
              INSERT (key, value, headers, kafka_offset)
              VALUES (s.key, s.value, s.headers, s.offset)
            """
        )
        summary = {
            "records_read": batch.count(),
            "tombstones_read": batch.where("value IS NULL").count(),
            "table_rows": spark.read.format("delta").load(table).count(),
            "change_feed_rows": spark.read.format("delta").option("readChangeFeed", "true")
            .option("startingVersion", 0).load(table).count(),
        }
        log.info("spark part took %.1f s", time.monotonic() - started)
    return summary
