"""The changelog's progress record: the last fully published version, with the stream time
and input position that travel with it, on ``<changelog>-progress``.

Its own module, below the publisher that writes it: ``ttl status``, drills, restores and
the stream's start read it, and none of them should load the publisher for that.

Publication from the executors (``ttl.changelog.partitioned``) publishes each changelog
partition in transactions of its own, each with that partition's own progress record
(key ``progress/<partition>``); the driver's record (key ``progress``) follows once every
partition holds the versions. So a partition can be ahead of the driver's record, for a
moment or after a crash between the two: ``Progress.ahead`` says which. Executors read
this module too, so it needs nothing of the driver's configuration (``KafkaClients`` is
only a type here).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from ttl.errors import ProgressUnreadable
from ttl.watermarks import READS_TO_END, read_to_end, watermark_offsets

if TYPE_CHECKING:
    from ttl.kafka import KafkaClients

PROGRESS_KEY = b"progress"
#: A changelog partition's own progress record: ``progress/<partition>``.
PARTITION_KEY_PREFIX = b"progress/"


def partition_key(partition: int) -> bytes:
    return PARTITION_KEY_PREFIX + str(partition).encode("ascii")


def partition_record(store: str, partition: int, version: int, now_ms: int) -> bytes:
    """Changelog partition ``partition`` holds every version up to ``version``."""
    return json.dumps({"store": store, "partition": partition, "version": version,
                       "published_at": now_ms}, sort_keys=True).encode()


@dataclass
class Progress:
    """The last fully published version and what travels with it."""

    version: int = -1
    stream_time: int | None = None
    input_offsets: dict = field(default_factory=dict)
    #: The Delta table id of the table published (``ttl.changelog.continuity``); ``None``
    #: in progress records written before they named it.
    table_id: str | None = None
    #: Changelog partitions whose own progress is past ``version`` (partition -> version):
    #: publication from the executors got that far there (module docstring).
    ahead: dict[int, int] = field(default_factory=dict)
    #: Whether the read saw any partition's own record: the executors published lately.
    partitioned: bool = False

    @property
    def highest(self) -> int:
        """The highest version any partition holds: what a new table's versions continue
        after, and what the table's own versions must not fall below."""
        return max([self.version, *self.ahead.values()])

    def partition_version(self, partition: int) -> int:
        """The last version changelog partition ``partition`` holds."""
        return max(self.version, self.ahead.get(partition, -1))

    def to_json(self, store: str, now_ms: int) -> bytes:
        return json.dumps({"store": store, "version": self.version,
                           "stream_time": self.stream_time,
                           "input_offsets": self.input_offsets, "table_id": self.table_id,
                           "published_at": now_ms}, sort_keys=True).encode()

    def copy(self) -> Progress:
        return replace(self, input_offsets=dict(self.input_offsets), ahead=dict(self.ahead))


def read_progress(kafka: KafkaClients, topic: str, timeout: float = 30.0,
                  tail: int = 200) -> Progress:
    """The last committed progress record (``read_committed``), or a fresh ``Progress`` for
    an empty topic, with the partitions ahead of it (``Progress.ahead``).

    The topic is read to its stable end; a read that does not get there within ``timeout``
    raises ``ProgressUnreadable``: a partial read proves nothing, and a fresh ``Progress``
    would republish from version 0.
    """
    consumer = kafka.consumer(**{"enable.partition.eof": True, **READS_TO_END})
    try:
        return read_progress_with(consumer, topic, timeout, tail)
    finally:
        consumer.close()


def read_progress_with(consumer, topic: str, timeout: float = 30.0,
                       tail: int = 200) -> Progress:
    """``read_progress`` through a ``read_committed`` consumer (``enable.partition.eof``)
    the caller made and closes: an executor's, from plain client settings. ``tail``: how
    many offsets at the end to read first (more for a changelog of many partitions,
    ``partitioned.progress_tail``)."""
    deadline = time.monotonic() + timeout
    low, high = watermark_offsets(consumer, topic, 0, deadline)
    # The last offsets hold the last progress, unless aborted transactions (records a
    # committed reader skips, and their markers) or many partitions' records filled them:
    # then the whole (compacted, small) topic. A partition's record ahead of the driver's
    # comes after it, so a read that finds the driver's last record finds those too.
    for start in dict.fromkeys((max(low, high - tail), low)):
        if high <= start:
            break
        last, partitions, seen = _last_progress(consumer, topic, start, high, deadline,
                                                timeout)
        if last is None and start != low:
            continue
        progress = Progress()
        if last is not None:
            doc = json.loads(last)
            progress = Progress(doc["version"], doc.get("stream_time"),
                                doc.get("input_offsets") or {}, doc.get("table_id"))
        progress.ahead = {p: v for p, v in partitions.items() if v > progress.version}
        progress.partitioned = seen
        return progress
    return Progress()


def _last_progress(consumer, topic: str, start: int, high: int, deadline: float,
                   timeout: float) -> tuple[bytes | None, dict[int, int], bool]:
    """The last committed progress value from ``start`` to the stable end, the last
    version of each partition's own record after it, and whether any partition's record
    was read."""
    last, partitions, seen = None, {}, False
    try:
        for msg in read_to_end(consumer, topic, 0, start, deadline):
            if msg.value() is None:
                continue
            if msg.key() == PROGRESS_KEY:
                last, partitions = msg.value(), {}
            elif (msg.key() or b"").startswith(PARTITION_KEY_PREFIX):
                doc = json.loads(msg.value())
                partitions[int(doc["partition"])] = int(doc["version"])
                seen = True
    except TimeoutError:
        raise ProgressUnreadable(f"the progress topic {topic} was not read to its end "
                                 f"(offset {high}) within {timeout:.0f} s") from None
    return last, partitions, seen


def published_progress(kafka: KafkaClients, topic: str) -> Progress | None:
    """``read_progress``, or ``None`` when the changelog has no progress topic ``topic``
    (which versions are published is then unknown)."""
    if kafka.watermarks(topic) is None:
        return None
    return read_progress(kafka, topic)
