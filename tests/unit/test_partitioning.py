"""The changelog's partitioner, written down: Kafka's own murmur2 test vectors."""

from __future__ import annotations

from ttl.changelog.partitioning import murmur2, partition_of


def test_murmur2_is_kafkas():
    """``UtilsTest.testMurmur2`` of Apache Kafka, as signed Java ints."""
    vectors = {b"21": -973932308, b"foobar": -790332482,
               b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
               b"abc": 479470107}
    for key, signed in vectors.items():
        assert murmur2(key) == signed & 0xFFFFFFFF, key


def test_partition_is_the_positive_hash_modulo_the_count():
    assert partition_of(b"21", 7) == (-973932308 & 0x7FFFFFFF) % 7
    assert {partition_of(f"k{i}".encode(), 3) for i in range(100)} == {0, 1, 2}


def test_a_batchs_held_rows_get_their_version_from_the_task_not_the_plan():
    """``with_partition``: rows of one version (a batch's held rows) get it first, the
    partition last; rows that carry their versions (the change feed's) keep them."""
    import pyarrow as pa

    from ttl.changelog.partitioned import PARTITION, VERSION, with_partition

    rows = pa.record_batch({"key": [b"a", b"21"], "present": [1, 0]})
    [out] = with_partition([rows], partitions=7, version=12)
    assert out.schema.names == [VERSION, "key", "present", PARTITION]
    assert out.schema.field(VERSION).type == pa.int64()
    assert not out.schema.field(VERSION).nullable
    required = pa.record_batch([pa.array([b"a"])], schema=pa.schema(
        [pa.field("key", pa.binary(), nullable=False)]))
    [kept_flags] = with_partition([required], partitions=7, version=1)
    assert not kept_flags.schema.field("key").nullable  # as the plan declared it
    assert out.column(VERSION).to_pylist() == [12, 12]
    assert out.column(PARTITION).to_pylist() == [partition_of(b"a", 7), partition_of(b"21", 7)]
    fed = pa.record_batch({VERSION: [3, 4], "key": [b"a", b"21"]})
    [kept] = with_partition([fed], partitions=7)
    assert kept.schema.names == [VERSION, "key", PARTITION]
    assert kept.column(VERSION).to_pylist() == [3, 4]
