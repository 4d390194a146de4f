"""The changelog topics and their rules (BRIEF §5).

Two compacted topics per store:

* ``<changelog_topic>``: every change of the table, keyed by the store key;
* ``<changelog_topic>-progress``: one key (``progress``), the last fully published Delta
  version with its stream time and input offsets, written in the same Kafka transaction as
  that version's records (so publication progress is atomic with publication).

Rules every writer checks before it starts (``check``), naming the broken setting:
``cleanup.policy`` exactly ``compact`` (``delete`` or ``compact,delete`` would silently
expire state), ``message.timestamp.type = LogAppendTime`` (the exact timestamp travels in the
``ttl.ts`` header; Kafka cannot carry negative or far-future timestamps), and the partition
count recorded in the table (``ttl.changelog.partitions``): a change would move keys.
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from ttl.config import ChangelogConfig, KafkaConfig
from ttl.errors import TopicError

PROGRESS_SUFFIX = "-progress"
PROP_PARTITIONS = "ttl.changelog.partitions"


def progress_topic(changelog_topic: str) -> str:
    return changelog_topic + PROGRESS_SUFFIX


def topic_settings(conf: ChangelogConfig) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "message.timestamp.type": "LogAppendTime",
        "delete.retention.ms": str(conf.delete_retention),
        "min.compaction.lag.ms": str(conf.min_compaction_lag),
        "segment.ms": str(conf.segment),
        "min.cleanable.dirty.ratio": str(conf.min_cleanable_dirty_ratio),
    }


@dataclass(frozen=True)
class TopicState:
    name: str
    partitions: int
    settings: dict[str, str]


def _admin(kafka: KafkaConfig, bootstrap: str) -> AdminClient:
    return AdminClient({**kafka.client_config(bootstrap), "log_level": 3})


def watermarks(kafka: KafkaConfig, bootstrap: str,
               name: str) -> dict[int, tuple[int, int]] | None:
    """Per partition (first offset, last stable offset), or None if the topic is missing.
    ``read_committed`` readers stop at the last stable offset: it is where a catch-up or a
    restore ends, and the difference bounds the records between."""
    import uuid

    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**kafka.client_config(bootstrap), "log_level": 3,
                         "group.id": f"ttl-offsets-{uuid.uuid4()}",
                         "isolation.level": "read_committed"})
    try:
        meta = consumer.list_topics(name, timeout=30).topics.get(name)
        if meta is None or meta.error is not None:
            return None
        return {p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)
                for p in meta.partitions}
    finally:
        consumer.close()


def describe(kafka: KafkaConfig, bootstrap: str, name: str) -> TopicState | None:
    """Partition count and configuration of a topic, or ``None`` if it does not exist."""
    admin = _admin(kafka, bootstrap)
    metadata = admin.list_topics(topic=name, timeout=30)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        return None
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return TopicState(name, len(topic.partitions), {k: v.value for k, v in configs.items()})


def create(kafka: KafkaConfig, changelog: ChangelogConfig, bootstrap: str) -> list[str]:
    """Create the changelog and progress topics if missing; returns the names created."""
    admin = _admin(kafka, bootstrap)
    wanted = {kafka.changelog_topic: kafka.changelog_partitions,
              progress_topic(kafka.changelog_topic): 1}
    existing = admin.list_topics(timeout=30).topics
    new = [NewTopic(name, partitions, kafka.replication_factor,
                    config=topic_settings(changelog))
           for name, partitions in wanted.items() if name not in existing]
    if new:
        for future in admin.create_topics(new, operation_timeout=30).values():
            future.result(timeout=60)
    return [t.topic for t in new]


def violations(state: TopicState | None, name: str, expected_partitions: int | None, *,
               engine_format: bool = True) -> list[str]:
    """Every rule the topic breaks, each naming the setting (empty = fine). A foreign
    changelog (``engine_format=False``) has no ``ttl.ts`` header, so its record timestamps
    are the data and ``LogAppendTime`` is not required: only compaction matters."""
    if state is None:
        return [f"topic {name} does not exist (run `ttl topic create`)"]
    problems = []
    policy = state.settings.get("cleanup.policy")
    if policy != "compact":
        problems.append(f"topic {name}: cleanup.policy is {policy!r}, must be exactly 'compact' "
                        "(delete retention would silently expire state)")
    ts_type = state.settings.get("message.timestamp.type")
    if engine_format and ts_type != "LogAppendTime":
        problems.append(f"topic {name}: message.timestamp.type is {ts_type!r}, must be "
                        "'LogAppendTime' (the exact timestamp travels in ttl.ts)")
    if expected_partitions is not None and state.partitions != expected_partitions:
        problems.append(f"topic {name}: has {state.partitions} partitions but the table records "
                        f"{expected_partitions} ({PROP_PARTITIONS}); a change would move keys")
    return problems


def check(kafka: KafkaConfig, bootstrap: str, recorded_partitions: int | None) -> TopicState:
    """Refuse (``TopicError``) a changelog or progress topic that breaks a rule."""
    problems = []
    state = describe(kafka, bootstrap, kafka.changelog_topic)
    problems += violations(state, kafka.changelog_topic, recorded_partitions)
    progress = progress_topic(kafka.changelog_topic)
    problems += violations(describe(kafka, bootstrap, progress), progress, 1)
    if problems:
        raise TopicError("; ".join(problems) + ". Operator action: fix the topic (or recreate "
                         "it with `ttl topic create`) before starting a writer.")
    assert state is not None
    return state


def recorded_partitions(properties: dict[str, str]) -> int | None:
    raw = properties.get(PROP_PARTITIONS)
    return int(raw) if raw else None


def prepare_for_store(spark, table_path: str, properties: dict[str, str], kafka: KafkaConfig,
                      bootstrap: str) -> TopicState:
    """Check the topics before a writer starts; record the partition count on first use.

    The count goes into the table (``ttl.changelog.partitions``) the first time a writer
    sees the topic, and from then on a topic with another count is refused.
    """
    recorded = recorded_partitions(properties)
    state = check(kafka, bootstrap, recorded)
    if recorded is None:
        spark.sql(f"ALTER TABLE delta.`{table_path}` SET TBLPROPERTIES "
                  f"('{PROP_PARTITIONS}' = '{state.partitions}')")
        properties[PROP_PARTITIONS] = str(state.partitions)
    return state
