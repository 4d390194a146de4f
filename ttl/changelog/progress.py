"""The changelog's progress record: the last fully published version, with the stream time
and input position that travel with it, on ``<changelog>-progress``.

Its own module, below the publisher that writes it: ``ttl status``, drills, restores and
the stream's start read it, and none of them should load the publisher for that.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

from confluent_kafka import KafkaException, TopicPartition

from ttl.errors import ProgressUnreadable
from ttl.kafka import KafkaClients, watermark_offsets

PROGRESS_KEY = b"progress"


@dataclass
class Progress:
    """The last fully published version and what travels with it."""

    version: int = -1
    stream_time: int | None = None
    input_offsets: dict = field(default_factory=dict)
    #: The Delta table id of the table published (``ttl.changelog.continuity``); ``None``
    #: in progress records written before they named it.
    table_id: str | None = None

    def to_json(self, store: str, now_ms: int) -> bytes:
        return json.dumps({"store": store, "version": self.version,
                           "stream_time": self.stream_time,
                           "input_offsets": self.input_offsets, "table_id": self.table_id,
                           "published_at": now_ms}, sort_keys=True).encode()

    def copy(self) -> Progress:
        return replace(self, input_offsets=dict(self.input_offsets))


def read_progress(kafka: KafkaClients, topic: str, timeout: float = 30.0) -> Progress:
    """The last committed progress record (``read_committed``), or a fresh ``Progress`` for
    an empty topic.

    The topic is read to its stable end; a read that does not get there within ``timeout``
    raises ``ProgressUnreadable``: a partial read proves nothing, and a fresh ``Progress``
    would republish from version 0.
    """
    consumer = kafka.consumer(**{"enable.partition.eof": True})
    try:
        deadline = time.monotonic() + timeout
        low, high = watermark_offsets(consumer, topic, 0, deadline)
        # The last 200 offsets hold the last progress, unless aborted transactions (records
        # a committed reader skips, and their markers) filled them: then the whole
        # (compacted, small) topic.
        for start in dict.fromkeys((max(low, high - 200), low)):
            if high <= start:
                break
            last = _last_progress(consumer, topic, start, high, deadline, timeout)
            if last is not None:
                doc = json.loads(last)
                return Progress(doc["version"], doc.get("stream_time"),
                                doc.get("input_offsets") or {}, doc.get("table_id"))
        return Progress()
    finally:
        consumer.close()


def _last_progress(consumer, topic: str, start: int, high: int, deadline: float,
                   timeout: float) -> bytes | None:
    """The last committed progress value from ``start`` to the stable end."""
    consumer.assign([TopicPartition(topic, 0, start)])
    last = None
    while True:
        if time.monotonic() > deadline:
            raise ProgressUnreadable(f"the progress topic {topic} was not read to its end "
                                     f"(offset {high}) within {timeout:.0f} s")
        msg = consumer.poll(0.5)
        if msg is None:
            continue
        if msg.error() is not None:
            if msg.error().code() == -191:  # _PARTITION_EOF: read up to the stable end
                return last
            raise KafkaException(msg.error())
        if msg.key() == PROGRESS_KEY and msg.value() is not None:
            last = msg.value()


def published_progress(kafka: KafkaClients, topic: str) -> Progress | None:
    """``read_progress``, or ``None`` when the changelog has no progress topic ``topic``
    (which versions are published is then unknown)."""
    if kafka.watermarks(topic) is None:
        return None
    return read_progress(kafka, topic)


