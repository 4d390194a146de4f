"""A partition's watermarks, asked until the broker can answer: a small helper of every
reader of offsets, the driver's (``ttl.kafka``) and the executors' publication
(``ttl.changelog.partitioned``), which needs nothing of the driver's configuration."""

from __future__ import annotations

import time


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
