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
