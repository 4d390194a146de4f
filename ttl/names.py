"""Every name that more than one module (or a reader outside the engine) relies on.

A name here is part of a contract: engine headers are read by restores and by users'
consumers, table properties by other engines and by older/newer versions of this one,
commit ops by the publisher and status, sibling suffixes by operators finding tables. They
are written once so a rename is one edit, and so ``grep`` finds every user.
"""

from __future__ import annotations

from urllib.parse import urlparse

# -- engine headers (docs/semantics.md: input, changelog) -----------------------------------------

ENGINE_PREFIX = "ttl."
#: The URI schemes of S3 locations (Hadoop's ``s3a``, and the older names).
S3_SCHEMES = frozenset({"s3", "s3a", "s3n"})
HEADER_TS = "ttl.ts"  # exact event time, ASCII decimal (input and changelog)
HEADER_TTL = "ttl.ttl"  # per-record TTL in ms (input and changelog)
HEADER_OP = "ttl.op"  # changelog: put | delete | expire
HEADER_VERSION = "ttl.version"  # changelog: the Delta version the record comes from
HEADER_STREAM_TIME = "ttl.stream-time"  # changelog: stream time at that version, or "none"
HEADER_CLOCK = "ttl.clock"  # changelog expiries: wall | stream

INPUT_ENGINE_HEADERS = (HEADER_TS, HEADER_TTL)
CHANGELOG_ENGINE_HEADERS = (HEADER_TS, HEADER_OP, HEADER_VERSION, HEADER_STREAM_TIME,
                            HEADER_TTL, HEADER_CLOCK)

# -- store table properties (docs/semantics.md) ---------------------------------------------------

PROP_FORMAT = "ttl.format.version"
PROP_NAME = "ttl.store.name"
PROP_TTL = "ttl.ttl.ms"  # the store TTL in ms, or "none"
PROP_STREAM_TIME_FLOOR = "ttl.stream_time.floor"  # outlives the log's retention
# The version up to which the floor is at least every commit's stream time: stream time is
# recovered from the floor and the commits after it, never from the whole log.
PROP_STREAM_TIME_THROUGH = "ttl.stream_time.floor_through"
# The input position the commits up to that version record (JSON, ``ttl.input_position``):
# written with the floor, so a clean-up of the log that removes those commits keeps it.
PROP_INPUT_POSITION = "ttl.input_position.floor"
PROP_CHANGELOG_PARTITIONS = "ttl.changelog.partitions"  # a change would move keys
PROP_UPGRADE_FROM = "ttl.upgrade.from_version"  # the rollback point of an in-place upgrade
PROP_LAST_NOOP_BATCH = "ttl.last_noop_batch.wall"  # the commit of a batch that changed no row
PROP_INPUT_SKIPPED = "ttl.input_skipped"  # the last lost input ranges skipped (JSON)
# The changelog's ttl.version of a Delta version is the version plus this (absent: 0). A
# restore into a new table sets it, so versions on the changelog never go back.
PROP_VERSION_OFFSET = "ttl.changelog.version_offset"
# A table restored from a point in time or another topic: its changes cannot be published
# onto the store's changelog one by one until ``ttl publish --reseed`` has published its
# whole state (tombstones for what the changelog has and it lacks included).
PROP_RESEED_REQUIRED = "ttl.changelog.reseed_required"
# A table a whole restore rebuilt from the store's changelog: the changelog version its
# state is at. Its publisher may take over the progress another table published, up to
# that version (``ttl.changelog.continuity``).
PROP_CONTINUES_AFTER = "ttl.changelog.continues_after"
# The owner id of the last process that took the store's lease over from another one it
# watched lapse: every engine write checks it is its own, or the one it found when it took
# the lease (``ttl.lease``).
PROP_LEASE_FENCE = "ttl.lease.fence"
# A table a restore created and has not finished writing ("true"; cleared by the restore's
# last commit): a failed restore's retry may overwrite it, nothing else may publish it.
PROP_RESTORE_PENDING = "ttl.restore.pending"
# When the scheduled OPTIMIZE and VACUUM last finished (wall-clock ms): a restarted stream
# or daemon runs one that is overdue at once, instead of an interval after its start.
PROP_OPTIMIZED_AT = "ttl.maintenance.optimized_at"
PROP_VACUUMED_AT = "ttl.maintenance.vacuumed_at"
# The newest file modification time (ms) the last full reordering of the table (a Z-order,
# or the ``both`` rewrite) left: files written after it hold rows in no order.
PROP_REORDERED_THROUGH = "ttl.maintenance.reordered_through"
PROP_REORDERED_BY = "ttl.maintenance.reordered_by"  # its cluster_by:optimize_file_bytes

# -- commit metadata ops (``userMetadata.op`` of the engine's commits) -----------------------

OP_BATCH = "batch"
OP_SWEEP = "sweep"
OP_ALTER = "alter"
OP_RESTORE = "restore"
OP_INPUT_SKIPPED = "input_skipped"  # lost input skipped on the operator's word
OP_DEAD_LETTERS = "dead_letters"  # a batch's dead letters (their own table's commits)

# -- sibling tables and topics ---------------------------------------------------------------

LEASE_SUFFIX = "_lease"
DEAD_LETTERS_SUFFIX = "_dead_letters"
DRILLS_SUFFIX = "_drills"
DRILL_SCRATCH_SUFFIX = "_drill_scratch"  # drills' scratch tables (``drill.scratch``)
# A batch's expired-on-arrival keys when too many for its commit's metadata (``write``)
EXPIRED_KEYS_SUFFIX = "_expired_keys"
PROGRESS_TOPIC_SUFFIX = "-progress"


def sibling(store_path: str, suffix: str) -> str:
    """The path of a table kept beside the store's (``<store path><suffix>``)."""
    return store_path.rstrip("/") + suffix


def progress_topic(changelog_topic: str) -> str:
    """The topic holding the publisher's progress, next to the changelog."""
    return changelog_topic + PROGRESS_TOPIC_SUFFIX


# -- identities in Kafka and Delta -----------------------------------------------------------

#: ``kafka.bootstrap_servers`` value that starts the local broker (``ttl.local.kafka``).
EMBEDDED = "embedded"


def publisher_transactional_id(store: str) -> str:
    """Fixed per store, so a restarted publisher fences a zombie (docs/semantics.md, Changelog)."""
    return f"ttl-{store}-changelog"


def partition_transactional_id(store: str, partition: int) -> str:
    """Fixed per store and changelog partition: publication from the executors has one
    producer per partition, and a task run again (or a zombie's) fences the one before
    (docs/scaling.md)."""
    return f"{publisher_transactional_id(store)}-p{partition}"


def batch_txn_app_id(store: str, query_id: str) -> str:
    """Delta's idempotent-write app id of a stream's batches (the batch id is the version)."""
    return f"ttl:{store}:batch:{query_id}"


def query_name(store: str) -> str:
    return f"ttl-{store}"


#: Logger of the per-batch JSON lines (README: ``ttl.batch``).
BATCH_LOGGER = "ttl.batch"

# Spark settings of the executors' fold (a profile's [spark] settings; ttl.store.distributed)
#: Whether the fold finds the batch's stored rows with a Bloom filter of their hashes
#: (``true``, the default) or a join with them.
KEY_FILTER_ENABLED = "spark.ttl.fold.key_filter.enabled"
#: The filter's false-positive rate, in (0, 1]; 1: no filter.
KEY_FILTER_FPP = "spark.ttl.fold.key_filter.fpp"


def local_path(path: str) -> str | None:
    """The file-system path of a table on the local file system (no scheme, or ``file:``),
    else ``None``."""
    parsed = urlparse(path)
    if parsed.scheme in ("", "file"):
        return parsed.path if parsed.scheme else path
    return None
