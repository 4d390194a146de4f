"""Dead letters replayed on a real broker: a replayed record lands in its key's partition."""

from __future__ import annotations

import time
import zlib

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from tests.support import clients, consume_all
from ttl import config, dead_letters
from ttl.changelog.partitioning import partition_of
from ttl.store.layout import headers_arrow_type

pytestmark = pytest.mark.integration

PARTITIONS = 6
NOW = 1_700_000_000_000


def test_a_replayed_dead_letter_lands_in_its_keys_murmur2_partition(kafka, topic_factory,
                                                                     tmp_path):
    """Issue 31, scenario 5: replay used librdkafka's default partitioner (CRC32), so a
    replayed record went to another input partition than its key's later records (the Java
    client's murmur2, which every other producer uses) and could overwrite a newer value.
    The key is chosen so that the two partitioners disagree."""
    key = next(k for k in (f"key-{i}".encode() for i in range(1000))
               if partition_of(k, PARTITIONS) != zlib.crc32(k) % PARTITIONS)
    expected = partition_of(key, PARTITIONS)
    topic = topic_factory("replay-in", partitions=PARTITIONS)
    conf = config.from_dict({
        "store": {"name": "replay", "path": str(tmp_path / "store")},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": topic,
                  "changelog_topic": f"{topic}-cl"},
        "stream": {"checkpoint": str(tmp_path / "checkpoint")},
    })
    schema = pa.schema([
        ("key", pa.binary()), ("value", pa.binary()), ("timestamp", pa.int64()),
        ("headers", headers_arrow_type()), ("source_partition", pa.int32()),
        ("source_offset", pa.int64()), pa.field("reason", pa.string(), nullable=False),
        ("detail", pa.string()), pa.field("rejected_at", pa.int64(), nullable=False)])
    # A recent record, and one older than the topic keeps records (retention.ms, 7 days by
    # default): the broker would delete that one at its next retention check (every 5 s on
    # the suite's broker), so it is counted and named, never produced.
    recent = int(time.time() * 1000)
    write_deltalake(conf.store.dead_letters, pa.Table.from_pylist([{
        "key": k, "value": b"old", "timestamp": ts, "headers": [{"key": "h", "value": b"1"}],
        "source_partition": 0, "source_offset": offset, "reason": "value_too_large",
        "detail": "test", "rejected_at": NOW} for k, ts, offset in (
            (key, recent, 7), (b"ancient", NOW, 8))], schema))

    result = dead_letters.replay(conf, clients(conf, kafka), "value_too_large", wall_ms=recent)

    assert (result.replayed, result.too_old) == (1, 1), result
    assert "1 not produced: their timestamps are older than" in result.line(topic)
    (msg,) = consume_all(kafka.bootstrap_servers, topic, 1)
    assert (msg.key(), msg.value()) == (key, b"old")
    assert msg.partition() == expected, (
        f"replayed into partition {msg.partition()}, the key's murmur2 partition is "
        f"{expected} (CRC32 gives {zlib.crc32(key) % PARTITIONS})")
    recorded = DeltaTable(dead_letters._replayed_path(conf)).to_pyarrow_table().to_pylist()
    assert [r["input_partition"] for r in recorded] == [expected]
