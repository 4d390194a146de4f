"""Publication from the executors: each changelog partition in transactions of its own.

Why: the driver's one transactional producer carries every record of every version (its
Python builds each record), which caps a cluster at what one driver core publishes. Here
the records stay on the executors (docs/scaling.md).

How it keeps the changelog's rules (docs/semantics.md, Changelog):

* The driver hands a range of versions as a DataFrame: the change feed's final row per
  (version, key), or a batch's own change rows held on the executors. Each row gets its
  key's changelog partition (``with_partition``: Kafka's murmur2, the partition any
  producer of the key would pick); rows are grouped by partition, ordered by version.
* A task publishes each changelog partition it holds through that partition's own
  transactional producer (``names.partition_transactional_id``). ``init_transactions``
  fences every earlier producer of the partition (a failed attempt of the task, a zombie
  driver's executors); then the task reads what the partition already holds, and skips
  it: the progress topic (its own progress record or the driver's) and the versions of
  the partition's own last records. Nobody can commit for the partition between that
  read and this task's commit without fencing it first, so the read is a
  compare-and-set: a partition gets each version once and in order, and a crash at worst
  repeats a version whole, never skips or reorders one.
* Why the partition's own records too: a ``read_committed`` reader of the progress topic
  stops at the first transaction still open there (another partition's, seconds long),
  so a late task of a former lease holder could miss a newer publication's progress
  record committed behind it, and send older versions after newer ones. Its own
  partition has no open transaction of its producer once the task has fenced it, so its
  last records say the truth: every version before the newest among them was published
  there whole (each publication goes in version order from what was published before;
  the newest may be there in part, after a crash in a version that spans transactions,
  and is sent again whole).
* The records and the partition's own progress record (``progress/<p>``: every version to
  the range's end) go in one transaction; a partition's share larger than
  ``max_records_per_transaction`` spans transactions, like the driver's, with the progress
  in the last one.
* When every task is done the driver writes its own progress record (version, stream
  time, input position) with its own producer, which fences its earlier incarnations.

Executors import this module: it needs the standard library, confluent-kafka and pyarrow
(imported where used), nothing of the driver's configuration.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ttl.changelog import format as fmt
from ttl.changelog.partitioning import partition_of
from ttl.changelog.progress import partition_key, partition_record, read_progress_with
from ttl.names import HEADER_VERSION, partition_transactional_id
from ttl.watermarks import READS_TO_END, read_to_end, watermark_offsets

#: The column ``with_partition`` adds: the row's changelog partition.
PARTITION = "_changelog_partition"
#: The commit version of a row (the change data feed's own column name).
VERSION = "_commit_version"
#: One row per changelog partition a task published.
RESULT_DDL = "partition INT, records BIGINT, puts BIGINT, tombstones BIGINT, skipped BIGINT"
QUIET = 3  # librdkafka's log level for the executors' clients: errors only


def producer_settings(transaction_timeout_ms: int, max_record_bytes: int) -> dict:
    """The changelog producers' settings, the driver's and the executors' alike."""
    return {
        "acks": "all",
        "linger.ms": 20,
        "compression.type": "lz4",
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "transaction.timeout.ms": transaction_timeout_ms,
        # Every record the store accepts fits (store.max_record_bytes bounds it);
        # librdkafka takes no less than 1000.
        "message.max.bytes": max(1_000, max_record_bytes),
    }


def produce(producer, topic: str, key: bytes, value: bytes | None, headers: list,
            partition: int | None = None) -> None:
    """``producer.produce``, waiting while its queue is full."""
    extra = {} if partition is None else {"partition": partition}
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=headers, **extra)
            return
        except BufferError:
            producer.poll(0.05)


@dataclass(frozen=True)
class VersionFacts:
    """What a version's records carry besides its rows: the stream time after it, and how
    its removed keys are told (the driver reads both from the version's commit)."""

    stream_time: int | None
    #: A sweep's version: every removal is an expiry by this clock.
    sweep: bool = False
    clock: str | None = None
    #: A batch's expired-on-arrival keys (hex), when its rows do not say it themselves.
    expired: frozenset[str] = frozenset()

    def removal(self, rows) -> fmt.Removal:
        clock = self.clock
        if self.sweep:
            return lambda key: ("expire", clock)
        if "removal_op" in rows.schema.names:  # a batch's own change rows say it
            ops = dict(zip(rows.column("key").to_pylist(),
                           rows.column("removal_op").to_pylist(), strict=True))
            return lambda key: ("expire", clock) if ops.get(key) == "expire" else (
                "delete", None)
        expired = self.expired
        return lambda key: ("expire", clock) if key.hex() in expired else ("delete", None)


@dataclass(frozen=True)
class Job:
    """One publication of a range of versions, as every task gets it."""

    client: dict  # librdkafka settings every client shares (servers, security)
    producer: dict  # ``producer_settings``
    topic: str
    progress_topic: str
    store: str
    partitions: int  # the changelog topic's
    offset: int  # the table's version offset: changelog version = Delta version + offset
    end: int  # the range's last Delta version
    versions: dict  # Delta version -> VersionFacts
    max_records_per_transaction: int
    commit_timeout_s: float
    now_ms: int


def with_partition(batches: Iterable, *, partitions: int, version: int | None = None
                   ) -> Iterator:
    """``mapInArrow``: every row with its key's changelog partition (``PARTITION``); with
    ``version``, rows of that one commit version get it first (``VERSION``). A batch's held
    rows get their version here rather than from a literal in the plan: Spark writes a
    long literal into the code it generates, a class to compile for every version."""
    import pyarrow as pa

    for batch in batches:
        if version is not None:
            batch = pa.RecordBatch.from_arrays(  # the columns' nullability kept
                [pa.repeat(pa.scalar(version, pa.int64()), batch.num_rows), *batch.columns],
                schema=pa.schema([pa.field(VERSION, pa.int64(), nullable=False),
                                  *batch.schema]))
        keys = batch.column("key").to_pylist()
        yield batch.append_column(PARTITION, pa.array(
            [partition_of(k, partitions) for k in keys], pa.int32()))


def publish_partitions(batches: Iterable, *, job: Job) -> Iterator:
    """``mapInArrow``: a task's rows (``with_partition``'s, ordered by partition, then
    version) -> one row of ``RESULT_DDL`` per changelog partition it published. Each
    partition is published as its rows stream in, so a task never holds more than a batch
    of them (a re-seed of a large table onto one partition included)."""
    import pyarrow as pa

    runs = _runs(batches)
    pending = next(runs, None)
    results, seen = [], set()
    while pending is not None:
        partition = pending[0]
        if partition in seen:  # its share must come at once (module docstring)
            raise ValueError(f"changelog partition {partition}'s rows are not contiguous")
        seen.add(partition)

        def of_partition(partition: int = partition) -> Iterator[tuple[int, object]]:
            nonlocal pending
            while pending is not None and pending[0] == partition:
                yield pending[1], pending[2]
                pending = next(runs, None)

        share = of_partition()
        results.append(publish_partition(partition, share, job))
        for _ in share:  # what a partition that had it all already did not read
            pass
    if results:
        yield pa.RecordBatch.from_pylist(results, schema=pa.schema([
            ("partition", pa.int32()), ("records", pa.int64()), ("puts", pa.int64()),
            ("tombstones", pa.int64()), ("skipped", pa.int64())]))


def _runs(batches: Iterable) -> Iterator[tuple[int, int, object]]:
    """``(partition, Delta version, rows)`` runs of consecutive rows, in the rows' order."""
    for batch in batches:
        parts = batch.column(PARTITION).to_pylist()
        versions = batch.column(VERSION).to_pylist()
        first = 0
        for i in range(1, len(parts) + 1):
            if i == len(parts) or (parts[i], versions[i]) != (parts[first], versions[first]):
                yield parts[first], versions[first], batch.slice(first, i - first)
                first = i


def publish_partition(partition: int, runs: Iterable, job: Job) -> dict:
    """Publish ``runs`` (``(Delta version, rows)`` in version order, all of changelog
    partition ``partition``) with the partition's own producer (module docstring).

    A share larger than ``max_records_per_transaction`` spans transactions; each one
    that ends after a version is complete carries the partition's progress up to that
    version, so a task run again after one of them starts after it (never sending an
    older version after a newer one); only the version under way is repeated whole."""
    from confluent_kafka import Consumer, Producer

    counts = {"partition": partition, "records": 0, "puts": 0, "tombstones": 0,
              "skipped": 0}
    producer = Producer({**job.client, **job.producer, "log_level": QUIET,
                         "transactional.id": partition_transactional_id(job.store, partition)})
    producer.init_transactions(60)  # fences the partition's earlier producers
    consumer = Consumer({**job.client, "group.id": f"ttl-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "enable.partition.eof": True, "log_level": QUIET, **READS_TO_END})
    try:
        held = read_progress_with(consumer, job.progress_topic,
                                  tail=progress_tail(job.partitions)).partition_version(
            partition)
        if held < job.end + job.offset:
            # A version in the partition's log is there whole only once a later one is:
            # a huge version spans transactions (below), and a crash can leave part of it.
            held = max(held, last_published(consumer, job.topic, partition) - 1)
    finally:
        consumer.close()
    last = job.end + job.offset
    if held >= last:
        for _, rows in runs:
            counts["skipped"] += rows.num_rows
        return counts

    def progress(version: int) -> None:
        produce(producer, job.progress_topic, partition_key(partition),
                partition_record(job.store, partition, version, job.now_ms), [], 0)

    producer.begin_transaction()
    in_txn = 0
    for version, rows in runs:
        at = version + job.offset
        if at <= held:
            counts["skipped"] += rows.num_rows
            continue
        if in_txn >= job.max_records_per_transaction:
            if at - 1 > held:  # every version before this one is in the transaction
                progress(at - 1)
            producer.commit_transaction(job.commit_timeout_s)
            producer.begin_transaction()
            in_txn = 0
        facts = job.versions[version]
        for key, value, headers in fmt.records(rows, at, facts.stream_time,
                                               facts.removal(rows)):
            produce(producer, job.topic, key, value, headers, partition)
            counts["records"] += 1
            counts["tombstones" if value is None else "puts"] += 1
            in_txn += 1
            if in_txn >= 2 * job.max_records_per_transaction:
                # Mid-version (a huge one): no progress, the version is repeated whole
                # after a crash (repeated, never skipped).
                producer.commit_transaction(job.commit_timeout_s)
                producer.begin_transaction()
                in_txn = 0
    progress(last)
    producer.commit_transaction(job.commit_timeout_s)
    return counts


def last_published(consumer, topic: str, partition: int, timeout: float = 10.0,
                   window: int = 8, most: int = 4096) -> int:
    """The newest changelog version among the last committed records of ``topic``'s
    ``partition`` (each record's engine ``ttl.version`` header: the last one, as user
    headers come first), read from its end back through ever larger windows (aborted
    transactions and their markers hold offsets too); -1 when none is found within
    ``most`` offsets or ``timeout`` seconds: the progress topic then decides alone, as it
    did before this read. Through a ``read_committed`` consumer
    (``enable.partition.eof``), after the partition's producer was fenced (module
    docstring). Every version before the one returned is in the partition whole; that one
    may be partly there (a version spanning transactions, cut by a crash)."""
    deadline = time.monotonic() + timeout
    low, high = watermark_offsets(consumer, topic, partition, deadline)
    start = high
    while start > max(low, high - most):
        start = max(low, high - most, start - window)
        window *= 8
        newest = -1
        try:
            for msg in read_to_end(consumer, topic, partition, start, deadline):
                version = next((value for name, value in reversed(msg.headers() or ())
                                if name == HEADER_VERSION), None)
                if version is not None and version.isdigit():
                    newest = max(newest, int(version))
        except TimeoutError:
            return -1
        if newest >= 0:
            return newest
    return -1


def progress_tail(partitions: int) -> int:
    """How many offsets at the progress topic's end hold its last driver's record: each
    range of versions adds a record and a commit marker per partition, then the driver's."""
    return 200 + 4 * partitions
