"""Table layouts: the store table (format v3) and its dead-letter table.

Store table, format version 3 (docs/semantics.md, Data model)::

    key         BINARY NOT NULL   unique
    value       BINARY NOT NULL   latest value
    ts          BIGINT NOT NULL   record timestamp, epoch ms, may be negative, never -2^63
    headers     ARRAY<STRUCT<key STRING, value BINARY>>   user headers, order kept
    expires_at  BIGINT            ts + ttl (saturating); NULL = never expires
    updated_at  BIGINT            wall-clock ms of the last write (audit)
    key_hash    BIGINT NOT NULL   xxhash64(key): Delta keeps no min/max stats for BINARY,
                                  so file pruning and clustering by key go through this
    record_ttl  BIGINT            the per-record TTL (``ttl.ttl``) the entry was written with;
                                  NULL = the store's TTL applies (a TTL change recomputes it)

Table properties: ``ttl.format.version`` (3), ``ttl.store.name``, ``ttl.ttl.ms`` (the store
TTL in ms or ``none``), change data feed and deletion vectors on, and data-skipping
statistics limited to the BIGINT columns that sweeps and key lookups filter on. Older layouts
(v1 = key, value; v2 = v1 + ts) are recognised by their columns and refused until upgraded.
"""

from __future__ import annotations

from ttl import delta_log
from ttl.errors import LayoutError, StoreMissing
from ttl.names import PROP_FORMAT, PROP_NAME, PROP_TTL

FORMAT_VERSION = 3

#: The headers schema, everywhere headers are stored or carried (store, dead letters, the
#: batch fold's rows, restores): order and duplicates kept, null values allowed.
HEADERS_TYPE = "ARRAY<STRUCT<key: STRING, value: BINARY>>"


def headers_arrow_type():
    """``HEADERS_TYPE`` as an Arrow type (executors have no SparkSession to parse DDL)."""
    import pyarrow as pa

    return pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))

#: Spark's ``xxhash64`` seed (``XxHash64.DEFAULT_SEED``): ``key_hashes`` must equal it.
KEY_HASH_SEED = 42


def key_hashes(keys):
    """Each key's ``key_hash``, computed in the driver: Spark's ``xxhash64(key)`` (XXH64 with
    seed 42, as a signed 64-bit integer); a test holds it to Spark's own.

    Why here and not in Spark: a batch's rows reach Spark from the driver as Arrow, and a
    column computed over such a frame is evaluated by Spark's ``ConvertToLocalRelation``
    rule, row by row and interpreted, on the driver, before the write starts. Measured on
    100k-row appends: 0.87-1.29 s with the column computed in Spark against 0.70-0.94 s
    with it computed here (this function: about 20 ms); README, Performance. Keys are
    never null (the fold dead-letters a null key)."""
    import pyarrow as pa
    import xxhash

    digests = [xxhash.xxh64_intdigest(key, KEY_HASH_SEED) for key in keys.to_pylist()]
    return pa.array(digests, pa.uint64()).view(pa.int64())


def hash_identifies_keys(keys, hashes, stored_keys, stored_hashes) -> bool:
    """Whether ``key_hash`` alone tells apart the stored rows of a batch's keys, so a write
    may delete them by ``key_hash`` alone (``write.replace_rows``, ``by_hash``): no two of
    ``keys`` share a hash (``hashes``: each key's, in the same order; a key may repeat),
    and every stored row that shares a hash with one of them is one of them, with that
    key's hash (``stored_keys``, ``stored_hashes``: every row the lookup found by
    ``key_hash``). Two keys with one xxhash64 are unlikely (about n^2 / 2^65 for n keys),
    never impossible; a row whose ``key_hash`` is not its key's breaks the table's rule
    (every write computes it), but an operator's UPDATE could leave one. Either way the
    write then deletes by ``key_hash`` and ``key`` together, as it always did."""
    import pyarrow.compute as pc

    if len(pc.unique(hashes)) != len(pc.unique(keys)):  # unique: a fifth of count_distinct
        return False
    at = pc.index_in(stored_keys, value_set=keys)  # a key's first place among ``keys``
    if at.null_count:  # a row of another key
        return False
    own = pc.take(hashes, at)
    return pc.all(pc.equal(own, stored_hashes), min_count=0).as_py() is True


STORE_COLUMNS = (
    "key BINARY NOT NULL, value BINARY NOT NULL, ts BIGINT NOT NULL, "
    f"headers {HEADERS_TYPE}, expires_at BIGINT, updated_at BIGINT, "
    "key_hash BIGINT NOT NULL, record_ttl BIGINT"
)

DEAD_LETTER_COLUMNS = (
    f"key BINARY, value BINARY, timestamp BIGINT, headers {HEADERS_TYPE}, "
    "source_partition INT, source_offset BIGINT, reason STRING NOT NULL, detail STRING, "
    "rejected_at BIGINT NOT NULL"
)

#: ``delta.checkpointInterval``: Delta checkpoints inside the commit that reaches the
#: interval (about +1 s for that batch: the trickle's slowest batches); at 1000 that is
#: rare, and the engine checkpoints in the background instead, when
#: ``delta_log.checkpoint_due`` (``DeltaStore``). Tables made before keep their interval:
#: setting it is a metadata commit, which an operator may make (README, Operations).
CHECKPOINT_INTERVAL = 1000

BASE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    "delta.enableDeletionVectors": "true",
    "delta.dataSkippingStatsColumns": "ts,expires_at,updated_at,key_hash",
    "delta.checkpointInterval": str(CHECKPOINT_INTERVAL),
}

#: The engine's own small tables (dead letters, lease, drill history) use no deletion
#: vectors, whatever the session's defaults say: declaring the reader feature would only
#: keep other engines (delta-rs's pyarrow path) from reading them.
def plain_table(properties: dict[str, str] | None = None) -> str:
    """``PLAIN_TABLE`` with more of the table's ``properties``."""
    props = {"delta.enableDeletionVectors": "false", **(properties or {})}
    return f"TBLPROPERTIES ({', '.join(f'{k!r} = {v!r}' for k, v in props.items())})"


PLAIN_TABLE = plain_table()


def ttl_property(ttl_ms: int | None) -> str:
    return "none" if ttl_ms is None else str(ttl_ms)


def store_properties(name: str, ttl_ms: int | None,
                     deletion_vectors: bool = True) -> dict[str, str]:
    return {**BASE_PROPERTIES, "delta.enableDeletionVectors": str(deletion_vectors).lower(),
            PROP_FORMAT: str(FORMAT_VERSION), PROP_NAME: name, PROP_TTL: ttl_property(ttl_ms)}


def tblproperties(props: dict[str, str]) -> str:
    return ", ".join(f"'{k}' = '{v}'" for k, v in props.items())


def set_properties(spark, path: str, props: dict[str, str]) -> None:
    """Set table properties in one commit (a metadata-only change)."""
    spark.sql(f"ALTER TABLE delta.`{path}` SET TBLPROPERTIES ({tblproperties(props)})")


def legacy_version(columns: list[str]) -> int | None:
    """Recognise v1/v2 layouts by their columns (tables written before format versions)."""
    names = set(columns)
    if names == {"key", "value"}:
        return 1
    if names == {"key", "value", "ts"}:
        return 2
    return None


def ensure_store_table(spark, path: str, name: str, ttl_ms: int | None, *,
                       check_ttl: bool = True, deletion_vectors: bool = True,
                       create: bool = True,
                       creation_marks: dict[str, str] | None = None) -> dict[str, str]:
    """Create the v3 table at ``path`` (unless ``create`` is false: then ``StoreMissing``)
    or open it, checking layout and settings.

    ``creation_marks``: more properties, set only if this call creates the table.
    Idempotent. Raises ``LayoutError`` naming both values when the table was made for
    another layout or TTL (``ttl upgrade`` / ``ttl alter`` change those explicitly).
    """
    if not delta_log.is_delta_table(spark, path):
        if not create:
            raise StoreMissing(f"store {name}: there is no store table at {path}")
        props = {**store_properties(name, ttl_ms, deletion_vectors), **(creation_marks or {})}
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({STORE_COLUMNS}) USING delta "
            f"TBLPROPERTIES ({tblproperties(props)})"
        )
    props = delta_log.properties(spark, path)
    version = props.get(PROP_FORMAT)
    if version is None:
        columns = spark.read.format("delta").load(path).columns
        legacy = legacy_version(columns)
        found = f"v{legacy}" if legacy else f"an unknown layout with columns {columns}"
        raise LayoutError(
            f"table {path} has {found}; this engine needs format v{FORMAT_VERSION}. "
            "Operator action: run `ttl upgrade`."
        )
    if version != str(FORMAT_VERSION):
        raise LayoutError(f"table {path} has format v{version} ({PROP_FORMAT}); "
                          f"this engine needs v{FORMAT_VERSION}")
    expected = ttl_property(ttl_ms)
    if check_ttl and props.get(PROP_TTL) != expected:
        raise LayoutError(
            f"table {path} was made with store.ttl = {props.get(PROP_TTL)} ms ({PROP_TTL}), "
            f"the configuration says {expected}. Operator action: run `ttl alter --ttl` to "
            "change the TTL explicitly, or fix store.ttl."
        )
    if props.get(PROP_NAME) != name:
        raise LayoutError(f"table {path} belongs to store {props.get(PROP_NAME)!r} "
                          f"({PROP_NAME}), the configuration says store.name = {name!r}")
    return props


#: A batch's expired-on-arrival keys, by the id of the write that removed them, when there
#: are too many for its commit's metadata (``write.EXPIRED_KEYS_INLINE``); ``written_at``
#: (wall ms) lets VACUUM remove the rows of commits whose change data is gone
#: (``eviction.vacuum``). Nullable: tables made before it get it added, and their rows
#: without it are kept.
EXPIRED_KEYS_COLUMNS = "write_id STRING NOT NULL, key BINARY NOT NULL, written_at BIGINT"


def ensure_expired_keys_table(spark, path: str) -> None:
    spark.sql(f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({EXPIRED_KEYS_COLUMNS}) USING delta "
              f"{PLAIN_TABLE}")
    if "written_at" not in spark.read.format("delta").load(path).columns:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS (written_at BIGINT)")


def ensure_dead_letter_table(spark, path: str) -> None:
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS delta.`{path}` ({DEAD_LETTER_COLUMNS}) USING delta "
        f"{PLAIN_TABLE}"
    )
