"""Whether Delta's log store for the store's tables keeps a second driver from committing.

Every guarantee of ``ttl`` rests on one writer per store: the lease (a Delta table beside
the store) says who it is, and Delta's optimistic commits keep two writers from both
writing version N of a table. That second part is the log store's: a commit is "create
``_delta_log/N.json`` unless it exists", which HDFS, the local file system, ADLS (atomic
rename) and GCS (preconditions) do across machines. On S3 Delta's default store,
``S3SingleDriverLogStore``, excludes concurrent commits only inside one JVM: two drivers can
both write version N, the second overwriting the first, and both believe they hold the
lease (its row is committed the same way). So a store on S3 needs a log store that
coordinates commits across drivers (Delta's ``S3DynamoDBLogStore``), or an explicit
statement that only one driver will ever write it. docs/operations.md ("Object storage")
says what holds with and without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlparse

from ttl.config import Config
from ttl.names import S3_SCHEMES  # Delta serves them with S3SingleDriverLogStore by default

#: The multi-driver store for S3 (DynamoDB holds the commit's mutual exclusion).
S3_MULTI_DRIVER = "io.delta.storage.S3DynamoDBLogStore"
#: ttl's store for S3 with conditional PUTs (``ttl/jvm/S3ConditionalLogStore.java``), for S3
#: and servers that refuse a PUT with ``If-None-Match: *`` on an existing key.
S3_CONDITIONAL = "ttl.delta.S3ConditionalLogStore"
#: The log stores that exclude a second driver's commit on S3; any other (Delta's default,
#: the rename-based stores, another scheme's) does not.
SAFE_ON_S3 = frozenset({S3_MULTI_DRIVER, S3_CONDITIONAL})
#: Delta reads its log store settings under both prefixes (``LogStore.getLogStoreConfValue``).
_PREFIXES = ("spark.delta.logStore.", "delta.logStore.")
#: The Spark setting of Hadoop's default file system: where Spark puts a path with no scheme.
DEFAULT_FS = "spark.hadoop.fs.defaultFS"
#: The schemes of the local file system, which ttl takes a path with no scheme to be on.
_LOCAL = ("", "file")


def log_store_class(settings: dict[str, str], scheme: str) -> tuple[str | None, str | None]:
    """The log store a Spark session with ``settings`` gives ``scheme``'s paths, when the
    settings name one, and the setting that names it (``spark.delta.logStore.class`` for
    every scheme, else ``spark.delta.logStore.<scheme>.impl``); ``(None, None)``: Delta's
    default for the scheme."""
    for suffix in ("class", f"{scheme}.impl"):
        for prefix in _PREFIXES:
            if f"{prefix}{suffix}" in settings:
                return settings[f"{prefix}{suffix}"], f"{prefix}{suffix}"
    return None, None


def problem(conf: Config, settings: dict[str, str] | None = None, *,
            default_fs: str | None = None,
            also: Sequence[tuple[str, str]] = ()) -> str | None:
    """Why ``conf`` could let two drivers commit the same version of the store's tables
    (the error to refuse its writes with, naming the settings that fix it), or ``None``.
    ``settings``: the session's Spark settings (default: the profile's); ``default_fs``:
    Hadoop's default file system (default: ``settings``' ``spark.hadoop.fs.defaultFS``,
    else the local disk); ``also``: other tables the command writes, as (what names
    them, location), e.g. a restore's target.

    A location with no scheme is on Hadoop's default file system for Spark, and Delta picks
    its log store by that scheme; for ttl's Spark-free reads (delta-rs) it is a local
    directory. The two agree only when the default file system is the local one, so any
    other is refused here, before the log store is even looked at."""
    settings = conf.spark.settings if settings is None else settings
    default_fs = settings.get(DEFAULT_FS) if default_fs is None else default_fs
    default_scheme = (urlparse(default_fs or "").scheme or "").lower()
    for setting, path in (("store.path", conf.store.path),
                          ("store.dead_letter_path", conf.store.dead_letters), *also):
        scheme = (urlparse(path).scheme or "").lower()
        if scheme == "" and default_scheme not in _LOCAL:
            return (f"{setting} {path} has no scheme, and Spark's default file system "
                    f"(fs.defaultFS) is {default_fs}: Spark would write the table there "
                    f"while ttl's reads without Spark look for it on the local disk; write "
                    f"the whole location in {setting} ({default_scheme}://... or file:...)")
        if conf.store.allow_single_driver_log_store or scheme not in S3_SCHEMES:
            continue
        chosen, key = log_store_class(settings, scheme)
        if chosen in SAFE_ON_S3:
            continue
        which = (f"{chosen} (from {key})" if chosen
                 else "S3SingleDriverLogStore (Delta's default for S3)")
        return (f"{setting} {path} is on S3, where Delta's log store {which} cannot keep a "
                f"second driver from committing the same table version (nor from taking "
                f"the store's lease, a table on the same storage): set "
                f"spark.settings.\"spark.delta.logStore.{scheme}.impl\" = "
                f"\"{S3_MULTI_DRIVER}\" with its DynamoDB table, or "
                f"\"{S3_CONDITIONAL}\" where S3 refuses a PUT with If-None-Match "
                f"(docs/operations.md#object-storage), or, if no second driver can ever "
                f"write this store, store.allow_single_driver_log_store = true")
    return None


def session_view(spark) -> tuple[dict[str, str], str | None]:
    """A running session's Spark settings (what Delta picks its log store by: the
    context's, whatever set them: the profile, ``spark-defaults.conf``, ``spark-submit``,
    a session that was already running) and Hadoop's default file system (``core-site.xml``
    included), for ``problem``."""
    settings = dict(spark.sparkContext.getConf().getAll())
    # The session's Hadoop configuration, as Delta resolves a table's path with it: the
    # context's, plus ``spark.hadoop.*`` set on the session since it started.
    default_fs = spark._jsparkSession.sessionState().newHadoopConf().get("fs.defaultFS")
    return settings, default_fs
