"""Kafka clients, built in one place from a profile's ``[kafka]`` settings.

``KafkaClients`` pairs the settings with the bootstrap servers actually in use (the
configured ones, or the embedded broker's address) and builds every client the engine
needs: librdkafka's admin, consumer and producer, the options of Spark's Kafka source (the
Java client), topic watermarks, and the access check. Credentials come from environment
variables named by the ``*_env`` settings, are read when a client is built, and are never
logged; both clients get the same ones (Spark's as ``kafka.*`` options with a JAAS login).
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass

from ttl.batch_size import Sample
from ttl.config import KafkaConfig
from ttl.errors import ConfigError, KafkaAccessDenied, KafkaUnreachable
from ttl.watermarks import READS_TO_END, watermark_offsets

JAAS_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule"}

#: librdkafka log level of our clients: errors only (a closed connection is not news).
QUIET = 3

#: The partitioner of every producer: the Java client's murmur2 (``murmur2_random``: a
#: random partition for a null key). librdkafka's default (CRC32) puts most keys in another
#: partition than the Java client, Kafka Streams and Spark's Kafka sink do.
PARTITIONER = "murmur2_random"


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (backslash and quote escaped)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


@dataclass(frozen=True)
class KafkaClients:
    """Every Kafka client of one store, from its settings and the bootstrap servers in use."""

    conf: KafkaConfig
    bootstrap: str = ""

    def __post_init__(self) -> None:
        if not self.bootstrap:
            object.__setattr__(self, "bootstrap", self.conf.bootstrap_servers)

    # -- settings ---------------------------------------------------------------------------

    def _env(self, setting: str) -> str | None:
        env = getattr(self.conf, f"{setting}_env")
        if not env:
            return None
        if env not in os.environ:
            raise ConfigError(f"kafka.{setting}_env names ${env}, which is not set")
        return os.environ[env]

    def client_config(self) -> dict[str, str]:
        """librdkafka settings shared by every client; secrets come from the environment."""
        conf = {"bootstrap.servers": self.bootstrap}
        for setting in ("security_protocol", "sasl_username", "sasl_password",
                        "ssl_ca_location"):
            value = self._env(setting)
            if value is not None:
                conf[setting.replace("_", ".")] = value
        if self.conf.sasl_mechanism:
            conf["sasl.mechanism"] = self.conf.sasl_mechanism
        return conf

    def spark_options(self) -> dict[str, str]:
        """The same settings as ``kafka.*`` options of Spark's Kafka source (Java client).

        The values hold secrets: pass them to ``.option()`` only, never log them (Spark's
        Kafka connector redacts ``sasl.jaas.config`` in its own logs)."""
        client = self.client_config()
        options = {"kafka.bootstrap.servers": client["bootstrap.servers"]}
        for key in ("security.protocol", "sasl.mechanism"):
            if key in client:
                options[f"kafka.{key}"] = client[key]
        if "ssl.ca.location" in client:  # a PEM file, as librdkafka takes it
            options["kafka.ssl.truststore.type"] = "PEM"
            options["kafka.ssl.truststore.location"] = client["ssl.ca.location"]
        mechanism = self.conf.sasl_mechanism
        if mechanism and "sasl.username" in client:
            options["kafka.sasl.jaas.config"] = (
                f"{JAAS_MODULES[mechanism]} required "
                f"username={jaas_quote(client['sasl.username'])} "
                f"password={jaas_quote(client.get('sasl.password', ''))};")
        return options

    # -- clients ----------------------------------------------------------------------------

    def admin(self, **settings):
        from confluent_kafka.admin import AdminClient

        return AdminClient({**self.client_config(), "log_level": QUIET, **settings})

    def consumer(self, **settings):
        """A ``read_committed`` consumer in a group of its own that commits nothing: the
        engine reads positions it tracks itself (progress records, recorded offsets)."""
        from confluent_kafka import Consumer

        return Consumer({**self.client_config(), "group.id": f"ttl-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "isolation.level": "read_committed",
                         "log_level": QUIET, **settings})

    def producer(self, **settings):
        """A producer partitioning by the Java client's murmur2 (``PARTITIONER``) unless
        ``settings`` name another ``partitioner``.

        One partitioner for every producer, because a key's order holds only within one
        partition: a record of a key produced with another partitioner than the key's
        other records (a dead letter replayed with librdkafka's CRC32, say) lands in
        another input partition, and an old value can then overwrite a newer one."""
        from confluent_kafka import Producer

        return Producer({**self.client_config(), "log_level": QUIET,
                         "partitioner": PARTITIONER, **settings})

    # -- questions to the brokers ------------------------------------------------------------

    def watermarks(self, topic: str) -> dict[int, tuple[int, int]] | None:
        """Per partition (first offset, last stable offset), or ``None`` if the topic is
        missing. ``read_committed`` readers stop at the last stable offset: it is where a
        catch-up or a restore ends, and the difference bounds the records between."""
        consumer = self.consumer()
        try:
            meta = consumer.list_topics(topic, timeout=30).topics.get(topic)
            if meta is None or meta.error is not None:
                return None
            deadline = time.monotonic() + 30
            return {p: watermark_offsets(consumer, topic, p, deadline) for p in meta.partitions}
        finally:
            consumer.close()

    def first_record(self, topic: str, partition: int, start: int, end: int,
                     timeout: float = 30.0) -> int | None:
        """The offset of the first record in ``[start, end)`` of a partition, as Spark's
        Kafka source reads it (``read_uncommitted``: aborted records too; transaction
        markers are never records), or ``None`` when those offsets hold none. Offsets
        below the partition's first one count as holding records: they are gone, so
        nothing proves they held none."""
        from confluent_kafka import KafkaException, TopicPartition

        consumer = self.consumer(**{"isolation.level": "read_uncommitted",
                                    "enable.partition.eof": True, **READS_TO_END})
        try:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition),
                                                       timeout=timeout)
            if start < low:
                return start
            if start >= min(end, high):
                return None
            consumer.assign([TopicPartition(topic, partition, start)])
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:
                    if msg.error().code() == -191:  # _PARTITION_EOF
                        return None
                    raise KafkaException(msg.error())
                return msg.offset() if msg.offset() < end else None
            raise KafkaUnreachable(f"{topic} partition {partition}: offsets {start}..{end - 1} "
                                   f"were not read within {timeout:.0f} s")
        finally:
            consumer.close()

    def newest_records(self, topic: str, marks: dict[int, tuple[int, int]],
                       per_partition: int = 100, timeout: float = 10.0) -> Sample:
        """The bytes (key, value, headers) of up to ``per_partition`` of each partition's
        newest records below ``marks`` (``watermarks``: first and last stable offsets), as
        Spark's Kafka source reads them (``read_uncommitted``): what a batch's records
        weigh (``ttl.batch_size``). What ``timeout`` leaves unread, and a partition that
        answers with an error, are left out; an empty topic gives an empty sample."""
        from confluent_kafka import TopicPartition

        starts = {p: max(low, high - per_partition) for p, (low, high) in marks.items()
                  if high > low}
        records = size = 0
        if not starts:
            return Sample(0, 0)
        consumer = self.consumer(**{"isolation.level": "read_uncommitted",
                                    "enable.partition.eof": True, **READS_TO_END})
        try:
            consumer.assign([TopicPartition(topic, p, o) for p, o in starts.items()])
            open_ = set(starts)
            deadline = time.monotonic() + timeout
            while open_ and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is None:
                    continue
                if msg.error() is not None:  # its end (_PARTITION_EOF) or an error
                    if msg.error().fatal():
                        break  # the sample is what was read
                    if msg.partition() is not None and msg.partition() >= 0:
                        open_.discard(msg.partition())
                    continue  # a client's error (a broker down): until the deadline
                if msg.offset() >= marks[msg.partition()][1]:
                    open_.discard(msg.partition())
                    continue
                records += 1
                size += len(msg.key() or b"") + len(msg.value() or b"") + sum(
                    len(k.encode()) + len(v or b"") for k, v in msg.headers() or ())
        finally:
            consumer.close()
        return Sample(records, size)

    def end_offsets(self, topic: str) -> dict[int, int] | None:
        """Last stable offset per partition, or ``None`` if the topic is missing."""
        marks = self.watermarks(topic)
        return None if marks is None else {p: high for p, (_, high) in marks.items()}

    def partitions(self, topic: str) -> int | None:
        """The topic's partition count, or ``None`` if it does not exist."""
        admin = self.admin()
        found = admin.list_topics(timeout=30).topics.get(topic)
        return None if found is None or found.error is not None else len(found.partitions)

    def create_topic(self, topic: str, partitions: int, config: dict | None = None) -> None:
        from confluent_kafka.admin import NewTopic

        new = NewTopic(topic, partitions, self.conf.replication_factor, config=config or {})
        admin = self.admin()  # referenced until the future resolves (else: _DESTROY)
        admin.create_topics([new], operation_timeout=30)[topic].result(timeout=60)

    def check_access(self, source: str, timeout: float = 8.0) -> None:
        """Fail fast, naming the cause, when the brokers refuse our credentials or do not
        answer at all, before Spark starts.

        librdkafka retries a failed SASL handshake like a network error, so without this
        check a wrong password surfaces after 30 s of retry lines as a ``Broker transport
        failure`` traceback (and Spark's Java client would retry for longer still); an
        unreachable broker cost a minute and hundreds of client error lines. Authentication
        errors reach only the error callback. The message names settings, never their
        values.
        """
        from confluent_kafka import KafkaError, KafkaException

        refused: list[str] = []

        def on_error(err: KafkaError) -> None:
            if err.code() == KafkaError._AUTHENTICATION:
                refused.append(err.str())

        admin = self.admin(log_level=0, error_cb=on_error)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                admin.list_topics(timeout=1)
                return
            except KafkaException:
                admin.poll(0)  # serves the error callback
                if refused:
                    raise KafkaAccessDenied(
                        f"Kafka at {self.bootstrap} refused the credentials configured in "
                        f"{source}: {refused[-1]}") from None
        raise KafkaUnreachable(f"Kafka at {self.bootstrap} (kafka.bootstrap_servers in "
                               f"{source}) did not answer within {timeout:.0f} s")
