"""Assembly in one place: configuration -> Kafka endpoint, Spark session, store, publisher.

Every entry point (the ``ttl`` CLI and the ``jobs/`` scripts) builds its parts here, so a
job on a laptop and on a cluster differ only by their configuration file.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ttl.changelog import topic
from ttl.changelog.publisher import Publisher
from ttl.config import Config
from ttl.errors import ConfigError, TtlError

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    conf: Config
    bootstrap: str
    spark: object
    store: object

    def publisher(self) -> Publisher:
        """Check the changelog topics (refusing a bad one), then start the fenced publisher."""
        topic.prepare_for_store(self.store.spark, self.store.path, self.store.properties,
                                self.conf.kafka, self.bootstrap)
        return Publisher(self.store.spark, self.store.path, self.conf.store.name,
                         self.conf.kafka, self.conf.changelog, self.bootstrap)


@contextlib.contextmanager
def kafka_endpoint(conf: Config, data_dir: Path | None = None) -> Iterator[str]:
    """The bootstrap servers: the configured ones, or an embedded local broker."""
    if conf.kafka.bootstrap_servers != "embedded":
        yield conf.kafka.bootstrap_servers
        return
    from ttl.kafka_local import LocalKafka

    base = Path(data_dir or Path(conf.store.path).parent)
    with LocalKafka(base / "kafka") as broker:
        yield broker.bootstrap_servers


class KafkaAccessDenied(TtlError):
    """The brokers refused the configured credentials. Operator action: fix the values of
    the environment variables named by ``kafka.sasl_username_env``/``sasl_password_env``."""


def check_kafka_access(conf: Config, bootstrap: str, timeout: float = 30.0) -> None:
    """Fail fast, naming the cause, when the brokers refuse our credentials.

    librdkafka retries a failed SASL handshake like a network error, so without this check a
    wrong password surfaces after 30 s of retry lines as a ``Broker transport failure``
    traceback (and Spark's Java client would retry for longer still). Authentication errors
    reach only the error callback; anything else (a broker still starting) is left to the
    callers' own timeouts. The message names settings, never their values.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient

    refused: list[str] = []

    def on_error(err: KafkaError) -> None:
        if err.code() == KafkaError._AUTHENTICATION:
            refused.append(err.str())

    admin = AdminClient({**conf.kafka.client_config(bootstrap), "log_level": 0,
                         "error_cb": on_error})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            admin.list_topics(timeout=1)
            return
        except KafkaException:
            admin.poll(0)  # serves the error callback
            if refused:
                raise KafkaAccessDenied(
                    f"Kafka at {bootstrap} refused the credentials configured in "
                    f"{conf.source}: {refused[-1]} (check the variables named by "
                    "kafka.sasl_username_env and kafka.sasl_password_env)") from None


def session(conf: Config):
    from ttl.spark import get_session

    return get_session(conf.spark)


def open_store(conf: Config, spark, *, wall_clock=None, check_ttl: bool = True):
    from ttl.store import DeltaStore

    return DeltaStore(spark, conf.store, clock=conf.eviction.clock, wall_clock=wall_clock,
                      check_ttl=check_ttl)


def ensure_input_topic(conf: Config, bootstrap: str, *, create: bool) -> int:
    """Partition count of the input topic; create it (embedded profile) or fail naming it."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({**conf.kafka.client_config(bootstrap), "log_level": 3})
    name = conf.kafka.input_topic
    found = admin.list_topics(timeout=30).topics.get(name)
    if found is not None and found.error is None:
        return len(found.partitions)
    if not create:
        raise ConfigError(f"{conf.source}: kafka.input_topic = {name!r} does not exist on "
                          f"{bootstrap}")
    admin.create_topics([NewTopic(name, conf.kafka.input_partitions,
                                  conf.kafka.replication_factor)])[name].result(timeout=60)
    return conf.kafka.input_partitions
