"""The dead-letter table, operable: ``ttl dead-letters`` lists, ``... replay`` sends back.

A record the store rejects lands in ``<store path>_dead_letters`` with its reason (README's
bad-input table). After the cause is fixed (a producer's header, a limit in the profile),
``replay`` produces the chosen records to the input topic again, as they came (key, value,
headers, timestamp), so the stream applies them like any other input.

Idempotent: each replayed record is recorded by its source position (input partition and
offset, and when it was rejected) in ``<store path>_dead_letters_replayed``; a second replay
skips it. The record is written there after the producer's delivery is confirmed, so a
crash in between replays it once more: the store's own rules make that harmless (the same
key, value and timestamp again change nothing).

Reads and the small bookkeeping append use delta-rs (no Spark): this is an operator's
command and should answer in about a second.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from ttl import delta_rs
from ttl.clock import wall_ms_or_now
from ttl.config import Config
from ttl.display import shown, utc
from ttl.errors import ReplayIncomplete, StoreMissing
from ttl.kafka import KafkaClients
from ttl.names import sibling

REPLAYED_SUFFIX = "_dead_letters_replayed"
_REPLAYED_SCHEMA = pa.schema([("source_partition", pa.int32()), ("source_offset", pa.int64()),
                              ("rejected_at", pa.int64()), ("replayed_at", pa.int64()),
                              ("input_partition", pa.int32()), ("input_offset", pa.int64())])


def _query(conf: Config, sql: str) -> pa.Table:
    from deltalake import QueryBuilder

    options = delta_rs.profile_options(conf)
    dead = delta_rs.table_if_exists(conf.store.dead_letters, options)
    if dead is None:  # made with the store's table
        raise StoreMissing(f"no Delta table at {conf.store.dead_letters} (the dead letters of "
                           f"store.path {conf.store.path})")
    builder = QueryBuilder().register("dead", dead)
    replayed = delta_rs.table_if_exists(_replayed_path(conf), options)
    if replayed is not None:
        builder.register("replayed", replayed)
    return pa.table(builder.execute(sql).read_all())


def _replayed_path(conf: Config) -> str:
    return sibling(conf.store.path, REPLAYED_SUFFIX)


def by_reason(conf: Config, samples: int = 3) -> list[dict]:
    """Per reason, most first: how many, when the first and last were rejected (epoch ms),
    how many were replayed, and the latest keys (``None`` for a record without one)."""
    has_replayed = delta_rs.is_table(_replayed_path(conf), delta_rs.profile_options(conf))
    replayed = ("count(r.source_offset)" if has_replayed else "0")
    join = ("LEFT JOIN replayed r ON d.source_partition = r.source_partition AND "
            "d.source_offset = r.source_offset AND d.rejected_at = r.rejected_at"
            if has_replayed else "")
    rows = _query(conf, f"SELECT d.reason, count(*) AS n, min(d.rejected_at) AS first, "
                        f"max(d.rejected_at) AS last, {replayed} AS replayed FROM dead d "
                        f"{join} GROUP BY d.reason ORDER BY n DESC, d.reason").to_pylist()
    out = []
    for r in rows:
        keys = _query(conf, f"SELECT key FROM dead WHERE reason = '{_sql_str(r['reason'])}' "
                            f"ORDER BY rejected_at DESC LIMIT {int(samples)}")["key"].to_pylist()
        out.append({"reason": r["reason"], "count": r["n"], "first_rejected_ms": r["first"],
                    "last_rejected_ms": r["last"], "replayed": r["replayed"],
                    "latest_keys": [None if k is None else bytes(k) for k in keys]})
    return out


def summary(conf: Config, samples: int = 3) -> list[str]:
    """One line per reason: how many, when first and last (UTC), replayed, sample keys."""
    rows = by_reason(conf, samples)
    if not rows:
        return ["no dead letters"]
    return [f"{r['reason']}: {r['count']} (rejected {utc(r['first_rejected_ms'])}.."
            f"{utc(r['last_rejected_ms'])}, replayed {r['replayed']}); latest keys: "
            + ", ".join("(null key)" if k is None else shown(k) for k in r["latest_keys"])
            for r in rows]


def _sql_str(text: str) -> str:
    return text.replace("'", "''")


@dataclass
class ReplayResult:
    chosen: int = 0
    replayed: int = 0
    already: int = 0
    not_replayable: int = 0  # no key: the input never accepts it
    too_old: int = 0  # older than the input topic keeps records: the broker would drop them
    retention_ms: int | None = None

    def line(self, topic: str) -> str:
        line = (f"replayed {self.replayed} of {self.chosen} dead letters to {topic} "
                f"({self.already} replayed before, {self.not_replayable} without a key "
                "cannot be)")
        if self.too_old:
            line += (f"; {self.too_old} not produced: their timestamps are older than "
                     f"{topic}'s retention.ms ({self.retention_ms} ms), so the broker would "
                     "delete them at its next retention check, before the stream reads "
                     "them (raise the topic's retention.ms to replay them)")
        return line


#: A replayed record keeps its timestamp (the entry's time). The broker deletes records
#: older than the topic's ``retention.ms`` at its next retention check (every 5 minutes by
#: default): one older than that, less this margin, is not produced.
RETENTION_MARGIN_MS = 3_600_000


def _oldest_kept(kafka: KafkaClients, topic: str, now: int) -> tuple[int | None, int | None]:
    """The oldest record timestamp ``topic`` keeps long enough for the stream to read it
    (``None``: any: no time retention, or broker-side timestamps), and its retention.ms."""
    from confluent_kafka.admin import ConfigResource

    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    admin = kafka.admin()  # held until the answer: a collected client cancels its requests
    configs = admin.describe_configs([resource])[resource].result(timeout=30)
    stamped = configs.get("message.timestamp.type")
    retention = configs.get("retention.ms")
    if (stamped is not None and stamped.value == "LogAppendTime") or retention is None:
        return None, None
    ms = int(retention.value)
    return (None, None) if ms < 0 else (now - ms + RETENTION_MARGIN_MS, ms)


def replay(conf: Config, kafka: KafkaClients, reason: str, *, key: bytes | None = None,
           wall_ms: int | None = None) -> ReplayResult:
    """Produce the dead letters of ``reason`` (and ``key``, if given) not replayed before
    to the input topic; record each after its delivery."""
    from deltalake import write_deltalake

    now = wall_ms_or_now(wall_ms)
    where = f"d.reason = '{_sql_str(reason)}'"
    if key is not None:
        where += f" AND d.key = X'{key.hex()}'"
    rows = _query(conf, f"SELECT * FROM dead d WHERE {where} "
                        "ORDER BY d.source_partition, d.source_offset").to_pylist()
    result = ReplayResult(chosen=len(rows))
    done: set[tuple] = set()
    if delta_rs.is_table(_replayed_path(conf), delta_rs.profile_options(conf)):
        done = {(r["source_partition"], r["source_offset"], r["rejected_at"])
                for r in _query(conf, "SELECT * FROM replayed").to_pylist()}
    # The producer's partitioner is the one every producer of the input uses (murmur2,
    # ``KafkaClients.producer``): a replayed record lands in its key's partition, behind
    # the key's earlier records and ahead of its later ones.
    producer = kafka.producer(**{"acks": "all", "enable.idempotence": True})
    oldest, result.retention_ms = _oldest_kept(kafka, conf.kafka.input_topic, now)
    delivered: list[dict] = []
    errors: list[str] = []

    def on_delivery(row: dict):
        def report(err, msg) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append({"source_partition": row["source_partition"],
                                  "source_offset": row["source_offset"],
                                  "rejected_at": row["rejected_at"], "replayed_at": now,
                                  "input_partition": msg.partition(),
                                  "input_offset": msg.offset()})
        return report

    topic = conf.kafka.input_topic
    for row in rows:
        if (row["source_partition"], row["source_offset"], row["rejected_at"]) in done:
            result.already += 1
            continue
        if row["key"] is None:
            result.not_replayable += 1
            continue
        headers = [(h["key"], None if h["value"] is None else bytes(h["value"]))
                   for h in row["headers"] or ()]
        ts = row["timestamp"]
        if oldest is not None and ts is not None and 0 < ts < oldest:
            result.too_old += 1  # the broker would delete it before the stream reads it
            continue
        producer.produce(topic, key=bytes(row["key"]),
                         value=None if row["value"] is None else bytes(row["value"]),
                         headers=headers, timestamp=ts if ts is not None and ts > 0 else 0,
                         on_delivery=on_delivery(row))
        producer.poll(0)
    producer.flush(60)
    producer.close()
    if delivered:
        replayed = _replayed_path(conf)
        write_deltalake(replayed, pa.Table.from_pylist(delivered, _REPLAYED_SCHEMA),
                        mode="append", storage_options=delta_rs.storage_options_for(
                            replayed, delta_rs.profile_options(conf)))
    result.replayed = len(delivered)
    if errors:

        raise ReplayIncomplete(f"{len(errors)} dead letters could not be produced to {topic} "
                               f"(the first: {errors[0]}); {len(delivered)} were, and are "
                               "recorded")
    return result
