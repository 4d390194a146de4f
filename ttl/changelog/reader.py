"""The changelog's read side: where it ends, a bounded Spark read of it, and each key's
last record. Restore, drills and the publisher's re-seed all read the changelog this way.

Below both ``ttl.restore`` and ``ttl.changelog.publisher`` (a re-seed needs the keys the
changelog holds): reading the changelog depends on neither writing it nor rebuilding a
table from it.
"""

from __future__ import annotations

import json

from ttl.errors import RestoreError
from ttl.kafka import KafkaClients
from ttl.names import ENGINE_PREFIX, HEADER_STREAM_TIME, HEADER_TS, HEADER_TTL, HEADER_VERSION
from ttl.store import layout


def watermarks(kafka: KafkaClients, name: str) -> dict[int, tuple[int, int]]:
    """The changelog's (first, last stable) offsets per partition; a missing topic is an
    error naming it."""
    marks = kafka.watermarks(name)
    if marks is None:
        raise RestoreError(f"changelog topic {name} does not exist on {kafka.bootstrap}")
    return marks


def end_offsets(kafka: KafkaClients, name: str) -> dict[int, int]:
    """Last stable offsets per partition."""
    return {p: high for p, (_, high) in watermarks(kafka, name).items()}


def bounded_ends(marks: dict[int, tuple[int, int]],
                 until_offsets: dict[int, int] | None) -> dict[int, int]:
    """Where the read stops: the captured ends, or the operator's ``until_offsets`` (each an
    exclusive end, as Kafka's end offsets are; every partition must be named)."""
    ends = {p: high for p, (_, high) in marks.items()}
    if until_offsets is None:
        return ends
    unknown = sorted(set(until_offsets) - set(ends))
    missing = sorted(set(ends) - set(until_offsets))
    if unknown or missing:
        raise RestoreError(f"--until-offsets must name every partition of the changelog "
                           f"{sorted(ends)} exactly (unknown {unknown}, missing {missing})")
    beyond = {p: (o, ends[p]) for p, o in until_offsets.items() if o > ends[p] or o < 0}
    if beyond:
        raise RestoreError("--until-offsets outside the changelog (partition: (asked, end)) "
                           f"{beyond}")
    return dict(until_offsets)


def parse_offsets(raw: str) -> dict[int, int]:
    """``"0:120,1:98"`` -> ``{0: 120, 1: 98}`` (the CLI's ``--until-offsets``)."""
    try:
        pairs = (item.split(":") for item in raw.split(",") if item.strip())
        return {int(p): int(o) for p, o in pairs}
    except ValueError as exc:
        raise RestoreError(f"--until-offsets {raw!r}: write partition:offset pairs separated "
                           "by commas, e.g. 0:120,1:98") from exc


#: Offsets per Spark task of the restore read: small enough to show progress and spread the
#: read over executors, large enough that task overhead stays negligible.
OFFSETS_PER_TASK = 250_000


def read_topic(spark, kafka: KafkaClients, name: str, ends: dict[int, int], span: int = 0):
    """A bounded ``read_committed`` Spark read of changelog ``name`` from its start up to
    ``ends`` (exclusive, per partition), headers included, split for ``span`` offsets."""
    starting = json.dumps({name: {str(p): -2 for p in ends}})
    ending = json.dumps({name: {str(p): o for p, o in ends.items()}})
    tasks = max(len(ends), -(-span // OFFSETS_PER_TASK))
    return (spark.read.format("kafka").options(**kafka.spark_options())
            .option("subscribe", name).option("includeHeaders", "true")
            .option("startingOffsets", starting).option("endingOffsets", ending)
            .option("minPartitions", str(tasks))
            .option("kafka.isolation.level", "read_committed").load())


#: The record converters a restore reads a changelog with (``--converter``).
CONVERTERS = ("engine", "plain")


def convert(records, converter: str):
    """Kafka rows -> (key, value, ts, headers, record_ttl, version, stream_time, ...).

    ``engine``: our own changelog (its headers carry ts, TTL, version, stream time);
    ``plain``: a foreign one taken as it is (value bytes, record timestamp, headers), such
    as a Kafka Streams store's: its changelog carries each entry's plain value with the
    entry's timestamp as the record's (and, for a header-aware store, its headers as the
    record's); the timestamped layouts of ``ttl.codec`` exist only inside the store."""
    from pyspark.sql import functions as F

    headers = F.coalesce("headers", F.array().cast(layout.HEADERS_TYPE))

    def header(name: str):
        found = F.filter(headers, lambda h: h["key"] == F.lit(name))
        return F.try_element_at(found, F.lit(-1))["value"].cast("string").try_cast("bigint")

    kafka_ts = F.unix_millis("timestamp")
    if converter == "plain":
        return records.select(
            "key", "value", kafka_ts.alias("ts"), headers.alias("headers"),
            F.lit(None).cast("bigint").alias("record_ttl"),
            F.lit(None).cast("bigint").alias("version"),
            F.lit(None).cast("bigint").alias("stream_time"), "partition", "offset",
            kafka_ts.alias("append_ts"))
    if converter != "engine":
        raise RestoreError(f"unknown record converter {converter!r} (use one of "
                           f"{', '.join(CONVERTERS)})")
    user = F.filter(headers, lambda h: ~h["key"].startswith(ENGINE_PREFIX))
    return records.select(
        "key", "value", F.coalesce(header(HEADER_TS), kafka_ts).alias("ts"),
        user.alias("headers"), header(HEADER_TTL).alias("record_ttl"),
        header(HEADER_VERSION).alias("version"),
        header(HEADER_STREAM_TIME).alias("stream_time"), "partition", "offset",
        kafka_ts.alias("append_ts"))


#: Marks the error a key found in two changelog partitions raises inside the write's job.
SPLIT_KEY = "ttl-restore-split-key:"


def per_key(converted, until_version: int | None = None):
    """One aggregation (one shuffle, no window): per key its last record in offset order,
    the partitions it was found in, and the figures the restore reports (records, last
    ``ttl.version``, stream time), so the topic is read once.

    With ``until_version`` only records up to it count (a point-in-time restore; a key with
    none has a null ``last``), ``beyond`` is the earliest append time of the key's records
    after it (what compaction may have used to remove records the restore needs) and
    ``t_in`` the latest append time of those up to it.
    """
    from pyspark.sql import functions as F

    fields = [c for c in converted.columns if c != "key"]
    inside = F.lit(True) if until_version is None else (
        F.col("version").isNull() | (F.col("version") <= until_version))
    return converted.groupBy("key").agg(
        F.max_by(F.struct(*fields), F.when(inside, F.col("offset"))).alias("last"),
        F.min("partition").alias("p_min"), F.max("partition").alias("p_max"),
        F.count(F.when(inside, 1)).alias("n"), F.max(F.when(inside, F.col("version"))).alias("v"),
        F.max(F.when(inside, F.col("stream_time"))).alias("st"),
        F.min(F.when(~inside, F.col("append_ts"))).alias("beyond"),
        F.max(F.when(inside, F.col("append_ts"))).alias("t_in"),
        F.max("version").alias("v_all"))


def live_last(keyed):
    """The live last record per key of ``per_key`` (a key whose last record is a tombstone
    is dropped).

    A key found in two partitions fails the job that evaluates it (``assert_true``, so no
    separate pass looks for such keys first); ``restore`` turns that failure into a
    ``RestoreError`` naming the key. The check sits in the filter that drops tombstones and
    in the key column, so every key meets it wherever the optimizer moves either.
    """
    from pyspark.sql import functions as F

    fields = keyed.schema["last"].dataType.names
    one_partition = F.assert_true(F.col("p_min") == F.col("p_max"),
                                  F.concat(F.lit(SPLIT_KEY), F.hex("key"), F.lit(":")))
    return (keyed.where(F.coalesce(one_partition.cast("boolean"),
                                   F.col("last")["value"].isNotNull()))
            .select(F.coalesce(one_partition.cast("binary"), F.col("key")).alias("key"),
                    *(F.col("last")[c].alias(c) for c in fields)))


def latest_per_key(converted):
    """The live last record per key in offset order (``per_key`` then ``live_last``)."""
    return live_last(per_key(converted))


def split_key_error(exc: Exception) -> RestoreError | None:
    text = str(exc)
    if SPLIT_KEY not in text:
        return None
    key = bytes.fromhex(text.split(SPLIT_KEY, 1)[1].split(":", 1)[0])
    return RestoreError(f"key {key!r} is in more than one changelog partition: the topic's "
                        "partitioning changed or two producers disagree; restore refuses to "
                        "guess which record is the last")
