"""A partition's watermarks, asked until the broker can answer, and a read to a
partition's end: small helpers of every reader of offsets, the driver's (``ttl.kafka``)
and the executors' publication (``ttl.changelog.partitioned``), which needs nothing of
the driver's configuration."""

from __future__ import annotations

import time
from collections.abc import Iterator

#: For a consumer that reads partitions to their end (``enable.partition.eof``): the broker
#: holds a fetch that finds nothing new for ``fetch.wait.max.ms`` (librdkafka's default,
#: 500 ms), and at the end every fetch finds nothing new. Measured on the local broker, a
#: read of the progress topic took 523 ms with the default and 27 ms with this; the
#: progress and a changelog partition's last records, read one after the other, 2.5 s and
#: 71 ms (``python -m tests.bench.partition_reads``).
READS_TO_END = {"fetch.wait.max.ms": 10}


def watermark_offsets(consumer, topic: str, partition: int, deadline: float) -> tuple[int, int]:
    """A partition's (low, high) watermarks. A topic created a moment ago has no leader yet,
    which the broker answers with a retriable error (or the client, whose metadata does not
    have it yet, with an unknown partition): ask again until ``deadline``
    (``time.monotonic``), then raise it."""
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    while True:
        try:
            return consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=max(1.0, deadline - time.monotonic()))
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = isinstance(err, KafkaError) and (err.retriable() or err.code() in (
                KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
                KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_PARTITION))
            if not retriable or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def read_to_end(consumer, topic: str, partition: int, start: int,
                deadline: float) -> Iterator:
    """The records of ``topic``'s ``partition`` from offset ``start`` to its end (the
    stable end for a ``read_committed`` consumer), through ``consumer``, made with
    ``enable.partition.eof`` (and ``READS_TO_END``); ``TimeoutError`` once ``deadline``
    (``time.monotonic``) passes first."""
    from confluent_kafka import KafkaException, TopicPartition

    consumer.assign([TopicPartition(topic, partition, start)])
    while True:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{topic} partition {partition} was not read to its end in time")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == -191:  # _PARTITION_EOF: the (stable) end
                return
            raise KafkaException(msg.error())
        yield msg
