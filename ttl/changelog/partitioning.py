"""Which changelog partition a key goes to: Kafka's default partitioner, computed here.

Every producer of the engine partitions by the Java client's murmur2 (``ttl.kafka``
``PARTITIONER``), and librdkafka computes it inside the producer. Publication from the
executors must know the partition before it produces (one transactional producer per
partition, docs/scaling.md), so the same function is written down here, in the standard
library only: executors import it.
"""

from __future__ import annotations

_M, _MASK = 0x5BD1E995, 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's ``Utils.murmur2`` as an unsigned 32-bit value (its test vectors hold it)."""
    h = (0x9747B28C ^ len(data)) & _MASK
    whole = len(data) // 4 * 4
    for i in range(0, whole, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * _M) & _MASK
        k ^= k >> 24
        k = (k * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if tail:
        h ^= tail[0]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition the Java client's default partitioner (and librdkafka's
    ``murmur2_random``) gives a non-null ``key`` on a topic of ``partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions
