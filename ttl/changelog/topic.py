"""The changelog topics and their rules (docs/semantics.md, Changelog).

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

from ttl.config import ChangelogConfig
from ttl.errors import TopicError
from ttl.kafka import KafkaClients
from ttl.names import PROP_CHANGELOG_PARTITIONS as PROP_PARTITIONS
from ttl.names import progress_topic
from ttl.store.layout import set_properties


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


def describe(kafka: KafkaClients, name: str) -> TopicState | None:
    """Partition count and configuration of a topic, or ``None`` if it does not exist."""
    from confluent_kafka.admin import ConfigResource

    admin = kafka.admin()
    metadata = admin.list_topics(topic=name, timeout=30)
    topic = metadata.topics.get(name)
    if topic is None or topic.error is not None:
        return None
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    return TopicState(name, len(topic.partitions), {k: v.value for k, v in configs.items()})


#: Kafka's default ``max.message.bytes`` of a topic (the broker's ``message.max.bytes``).
KAFKA_DEFAULT_MAX_MESSAGE_BYTES = 1_048_588


def create(kafka: KafkaClients, changelog: ChangelogConfig,
           max_record_bytes: int | None = None) -> list[str]:
    """Create the changelog and progress topics if missing; returns the names created. The
    changelog topic gets a ``max.message.bytes`` that carries ``max_record_bytes`` when
    Kafka's default would not."""
    from confluent_kafka.admin import NewTopic

    admin = kafka.admin()
    name = kafka.conf.changelog_topic
    wanted = {name: kafka.conf.changelog_partitions, progress_topic(name): 1}
    existing = admin.list_topics(timeout=30).topics
    settings = topic_settings(changelog)
    if max_record_bytes is not None and \
            max_message_needed(max_record_bytes) > KAFKA_DEFAULT_MAX_MESSAGE_BYTES:
        settings["max.message.bytes"] = str(max_message_needed(max_record_bytes))
    new = [NewTopic(topic, partitions, kafka.conf.replication_factor,
                    config=settings if topic == name else topic_settings(changelog))
           for topic, partitions in wanted.items() if topic not in existing]
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


def max_message_needed(max_record_bytes: int) -> int:
    """The changelog topic's smallest ``max.message.bytes`` for records of
    ``max_record_bytes``: the broker checks the compressed batch, and lz4 can grow an
    incompressible record by 1/255 plus its frame."""
    return max_record_bytes + max_record_bytes // 255 + 64


def size_violations(state: TopicState | None, max_record_bytes: int) -> list[str]:
    """The topic's ``max.message.bytes`` against the store's largest record."""
    if state is None or "max.message.bytes" not in state.settings:
        return []
    allowed = int(state.settings["max.message.bytes"])
    need = max_message_needed(max_record_bytes)
    if allowed >= need:
        return []
    return [f"topic {state.name}: max.message.bytes is {allowed}, below the {need} bytes "
            f"store.max_record_bytes ({max_record_bytes}) needs: a record the store accepts "
            "could not be published (raise the topic's max.message.bytes, or lower "
            "store.max_record_bytes)"]


def check(kafka: KafkaClients, recorded_partitions: int | None,
          max_record_bytes: int | None = None) -> TopicState:
    """Refuse (``TopicError``) a changelog or progress topic that breaks a rule."""
    problems = []
    name = kafka.conf.changelog_topic
    state = describe(kafka, name)
    problems += violations(state, name, recorded_partitions)
    if max_record_bytes is not None:
        problems += size_violations(state, max_record_bytes)
    progress = progress_topic(name)
    problems += violations(describe(kafka, progress), progress, 1)
    if problems:
        raise TopicError("; ".join(problems) + ". Operator action: fix the topic (or recreate "
                         "it with `ttl topic create`) before starting a writer.")
    assert state is not None
    return state


def recorded_partitions(properties: dict[str, str]) -> int | None:
    raw = properties.get(PROP_PARTITIONS)
    return int(raw) if raw else None


def prepare_for_store(spark, table_path: str, properties: dict[str, str],
                      kafka: KafkaClients, max_record_bytes: int | None = None) -> TopicState:
    """Check the topics before a writer starts; record the partition count on first use.

    The count goes into the table (``ttl.changelog.partitions``) the first time a writer
    sees the topic, and from then on a topic with another count is refused.
    """
    recorded = recorded_partitions(properties)
    state = check(kafka, recorded, max_record_bytes)
    if recorded is None:
        set_properties(spark, table_path, {PROP_PARTITIONS: str(state.partitions)})
        properties[PROP_PARTITIONS] = str(state.partitions)
    return state
