"""One typed configuration object, loaded from a TOML file in ``conf/``.

Validation is pydantic's (unknown keys and wrong types are errors); a failure becomes a
``ConfigError`` naming the file and the dotted setting, e.g. ``store.ttl``. Secrets never live
in the file: settings ending in ``_env`` name an environment variable instead.

Durations are written as ``"250ms"``, ``"30s"``, ``"5m"``, ``"2h"``, ``"7d"`` or a plain
integer of milliseconds, at most ``MAX_DURATION_MS``.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import SkipJsonSchema

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from ttl.errors import ConfigError
from ttl.model import CHANGELOG_OVERHEAD
from ttl.names import DEAD_LETTERS_SUFFIX, EMBEDDED, KEY_FILTER_ENABLED, KEY_FILTER_FPP, sibling

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF_DIR = REPO_ROOT / "conf"
#: Spark settings every profile starts from (then its own ``[spark.settings]``).
SPARK_DEFAULTS = CONF_DIR / "spark-defaults.conf"

_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_DURATION = re.compile(r"^\s*(\d+)\s*(ms|s|m|h|d)\s*$")

#: The longest duration any setting (or ``--ttl``) takes: 2^47 ms, about 4,460 years.
#: Every duration is added to a clock somewhere: to epoch milliseconds held in int64 (an
#: expiry ``ts + ttl``, a lease's end, ``now + max_future``) and to Python datetimes, which
#: end at the year 9999 (the scheduler's next run, ``now + interval``). A longer one used to
#: be accepted and then fail every batch (``OverflowError``); 2^47 ms keeps both sums far
#: inside their range (now + 2^47 ms is about the year 6500) and exceeds any real TTL or
#: interval. An entry that should never expire has no TTL (``store.ttl`` unset).
MAX_DURATION_MS = 2**47
#: The longest TTL (``store.ttl``, ``--ttl``; also ``store.max_future``): a signed 64-bit
#: millisecond count. Those are only ever added to a timestamp or a clock by a saturating
#: sum (``ttl.timestamps``: an
#: expiry past the int64 range is "never"), so it may take the whole range, as a record's
#: ``ttl.ttl`` header does.
MAX_TTL_MS = 2**63 - 1


def parse_duration_ms(raw: Any, *, longest: int = MAX_DURATION_MS) -> int:
    """Parse ``"30s"``-style durations (or integer ms) to milliseconds; one longer than
    ``longest`` is refused (a ``ValueError``, which names the setting at load)."""
    if isinstance(raw, bool):
        raise ValueError("a duration must be a number of ms or a string like '30s'")
    ms: int | None = None
    if isinstance(raw, int):
        ms = raw
    elif isinstance(raw, str):
        match = _DURATION.match(raw)
        if match:
            ms = int(match.group(1)) * _UNITS_MS[match.group(2)]
    if ms is None:
        raise ValueError(f"{raw!r} is not a duration (use e.g. '500ms', '30s', '5m', '2h', "
                         "'7d')")
    if ms > longest:
        about = "about 4,460 years" if longest == MAX_DURATION_MS else "the int64 range"
        raise ValueError(f"{raw!r} is longer than the longest duration, {longest} ms "
                         f"({about}); for entries that never expire leave the TTL unset")
    return ms


def parse_ttl_ms(raw: Any) -> int:
    """A TTL: a duration up to ``MAX_TTL_MS``."""
    return parse_duration_ms(raw, longest=MAX_TTL_MS)


def absolute_location(raw: Any) -> Any:
    """Local paths become absolute (Delta's path identifiers need it); URIs stay as they are
    (``s3a://...``, and ``file:/x``, which names the absolute path ``/x``)."""
    if isinstance(raw, str) and "://" not in raw and not raw.startswith(("/", "file:")):
        return str(Path(raw).resolve())
    return raw


def same_location(a: str, b: str) -> bool:
    """Whether two spellings name one table location: a ``file:`` prefix, trailing or
    doubled slashes, a relative path. The one rule for it (a restore into the store's own
    table, a drill's scratch beside it)."""

    def norm(raw: str) -> str:
        raw = str(absolute_location(raw.removeprefix("file://").removeprefix("file:")))
        scheme, sep, rest = raw.partition("://")
        return f"{scheme}{sep}{posixpath.normpath(rest)}" if sep else posixpath.normpath(raw)

    return norm(a) == norm(b)


#: What a duration setting accepts, for the profile's JSON Schema (``ttl config schema``).
_DURATION_SCHEMA = WithJsonSchema({
    "description": "a duration: '500ms', '30s', '5m', '2h', '7d', or integer milliseconds",
    "anyOf": [{"type": "string", "pattern": _DURATION.pattern}, {"type": "integer"}]})

Location = Annotated[str, BeforeValidator(absolute_location)]
DurationMs = Annotated[int, BeforeValidator(parse_duration_ms), Field(gt=0), _DURATION_SCHEMA]
NonNegDurationMs = Annotated[int, BeforeValidator(parse_duration_ms), Field(ge=0),
                             _DURATION_SCHEMA]
TtlMs = Annotated[int, BeforeValidator(parse_ttl_ms), Field(gt=0), _DURATION_SCHEMA]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class StoreConfig(_Section):
    """The store: its Delta table and the write semantics of docs/semantics.md (Write semantics)."""

    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    path: Location
    ttl: TtlMs | None = None
    late_records: Literal["update", "drop"] = "update"
    missing_timestamp: Literal["reject", "ingest_time"] = "reject"
    max_future: TtlMs = 86_400_000  # added to the clock by a saturating sum too
    max_value_bytes: int = Field(default=921_600, gt=0)
    max_headers_bytes: int = Field(default=65_536, gt=0)
    #: The largest changelog record an entry may make (key, value, headers, the engine's
    #: headers); larger records are dead-lettered. The publisher's producer allows exactly
    #: this (``message.max.bytes``); the changelog topic's ``max.message.bytes`` must too.
    max_record_bytes: int = Field(default=1_000_000, gt=0, le=1_000_000_000)
    dead_letter_path: Location | None = None
    #: Deletion vectors on the store table (set when the table is created): deletes and
    #: sweeps mark rows instead of rewriting files (faster), but readers must support the
    #: deletionVectors reader feature (delta-rs's pyarrow path, plain Parquet readers do
    #: not). See README "Reading the store from other engines".
    deletion_vectors: bool = True
    #: How a batch reads the stored rows of its keys (``ttl.store.lookup``): ``delta-rs`` in
    #: the driver (fast), ``spark``, or ``auto``: delta-rs for a table on the local file
    #: system, Spark for any other location.
    lookup: Literal["auto", "delta-rs", "spark"] = "auto"
    #: A store on S3 is refused unless Delta's log store there coordinates commits across
    #: drivers (``S3DynamoDBLogStore``): true runs it on one that does not, when no second
    #: driver can ever write the store (``ttl.single_writer``; docs/operations.md).
    allow_single_driver_log_store: bool = False

    @model_validator(mode="after")
    def _limits_fit_a_changelog_record(self) -> StoreConfig:
        need = self.max_value_bytes + self.max_headers_bytes + CHANGELOG_OVERHEAD
        if need > self.max_record_bytes:
            raise ValueError(
                f"store.max_value_bytes ({self.max_value_bytes}) + store.max_headers_bytes "
                f"({self.max_headers_bytes}) + {CHANGELOG_OVERHEAD} bytes of changelog "
                f"framing = {need} exceed store.max_record_bytes ({self.max_record_bytes}): "
                "a record within the limits could not be published; lower the limits, or "
                "raise store.max_record_bytes (and the changelog topic's max.message.bytes)")
        return self

    @property
    def dead_letters(self) -> str:
        return self.dead_letter_path or sibling(self.path, DEAD_LETTERS_SUFFIX)


class KafkaConfig(_Section):
    """Kafka: ``bootstrap_servers = "embedded"`` starts the local broker (docs/semantics.md).

    Security settings name environment variables (``*_env``), never values: the file can be
    committed and printed. ``ttl.kafka.KafkaClients`` reads them and builds both clients:
    librdkafka (our producers, consumers, admin) and the Java client inside Spark's Kafka
    source.
    """

    bootstrap_servers: str = EMBEDDED
    input_topic: str
    changelog_topic: str
    input_partitions: int = Field(default=2, gt=0)
    changelog_partitions: int = Field(default=2, gt=0)
    replication_factor: int = Field(default=1, gt=0)
    security_protocol_env: str | None = None
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username_env: str | None = None
    sasl_password_env: str | None = None
    ssl_ca_location_env: str | None = None

    @property
    def embedded(self) -> bool:
        """The profile asks for the local broker (``ttl.local.kafka``)."""
        return self.bootstrap_servers == EMBEDDED


class ChangelogConfig(_Section):
    """Compaction settings of the changelog topic, chosen for restore safety (docs/semantics.md).

    ``delete_retention`` must stay well above the time a restore takes: a tombstone is
    dropped that long after compaction reaches it, and a restore that has not read it by
    then brings the key back.
    """

    delete_retention: DurationMs = 7 * 86_400_000
    min_compaction_lag: NonNegDurationMs = 3_600_000
    segment: DurationMs = 86_400_000
    min_cleanable_dirty_ratio: float = Field(default=0.5, gt=0, le=1)
    transaction_timeout: DurationMs = 300_000
    max_records_per_transaction: int = Field(default=200_000, gt=0)
    #: Where records are published from (docs/scaling.md): ``driver``, one transactional
    #: producer in the driver; ``executors``, every version by one producer per changelog
    #: partition on the executors (which then need confluent-kafka); ``auto``, the
    #: executors on a cluster (a Spark master that is not ``local``), else the driver.
    publish_from: Literal["auto", "driver", "executors"] = "auto"

class EvictionConfig(_Section):
    """``clock`` picks what expires entries; wall sweeps run every ``interval`` (or on
    ``cron``), stream sweeps whenever stream time has advanced ``stream_interval``."""

    clock: Literal["wall", "stream", "both"] = "wall"
    interval: DurationMs = 10_000
    cron: str | None = None
    stream_interval: DurationMs = 1_000
    misfire_grace: DurationMs = 60_000
    lease: DurationMs = 30_000

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        if value is not None:
            from apscheduler.triggers.cron import CronTrigger

            CronTrigger.from_crontab(value)  # raises ValueError naming the bad field
        return value


#: ``maintenance.log_retention``'s default.
LOG_RETENTION_MS = 2 * 86_400_000


class MaintenanceConfig(_Section):
    """OPTIMIZE and VACUUM on the scheduler. VACUUM's retention must exceed the changelog
    publisher's worst lag plus the drills' time-travel window (checked before each run)."""

    optimize_interval: DurationMs | None = 6 * 3_600_000
    #: What OPTIMIZE orders the files by: ``expires_at`` (a Z-order) keeps a sweep to the
    #: files that hold due entries; ``key_hash`` (a Z-order) lets a lookup and a small
    #: batch's write read only the files that can hold its keys, and makes a sweep read
    #: every file; ``both`` groups the files by expiry and orders each group by
    #: ``key_hash``, so each reads about the square root of the files (docs/performance.md
    #: says when each pays).
    cluster_by: Literal["expires_at", "key_hash", "both"] = "expires_at"
    #: The file size OPTIMIZE aims at (Delta's ``optimize.maxFileSize``, 1 GiB by default;
    #: a Z-order writes the table's size over it, rounded down, so a file may be up to
    #: twice it): the smaller the files, the narrower their ranges and the more files a
    #: lookup or sweep skips, and the more files every full read opens.
    optimize_file_bytes: int = Field(default=128 * 2**20, gt=0)
    vacuum_interval: DurationMs | None = 86_400_000
    vacuum_retention: DurationMs = 7 * 86_400_000
    publisher_max_lag: DurationMs = 3_600_000
    drill_window: DurationMs = 86_400_000
    #: How often the log's commits older than ``log_retention`` are removed (``None``:
    #: never; Delta's own clean-up after ``delta.logRetentionDuration``, 30 days, stays):
    #: every snapshot update lists the log, and off S3 that costs in proportion to the
    #: commits it keeps (docs/operations.md, "Cleaning up the log").
    log_cleanup_interval: DurationMs | None = 3_600_000
    #: How long commits stay in the log; never before the publisher has published them.
    #: Unset: 2 days, or ``minimum_retention`` if that is longer.
    log_retention: DurationMs | None = None

    @property
    def minimum_retention(self) -> int:
        return self.publisher_max_lag + self.drill_window

    @property
    def log_retention_ms(self) -> int:
        return self.log_retention or max(LOG_RETENTION_MS, self.minimum_retention)

    @model_validator(mode="after")
    def _log_outlives_publication_and_drills(self) -> MaintenanceConfig:
        if (self.log_cleanup_interval and self.log_retention is not None
                and self.log_retention < self.minimum_retention):
            raise ValueError(
                f"maintenance.log_retention ({self.log_retention} ms) is shorter than "
                f"maintenance.publisher_max_lag + maintenance.drill_window "
                f"({self.minimum_retention} ms): the clean-up would remove commits the "
                "publisher or a drill's time travel still needs")
        return self


def _records_or_auto(value: Any) -> Any:
    """One message for a bad value (not the union's two)."""
    if value == "auto" or (isinstance(value, int) and not isinstance(value, bool)
                           and value > 0):
        return value
    raise ValueError(f'a positive number of records, or "auto"; not {value!r}')


class StreamConfig(_Section):
    """``on_lost_input``: what a start does when input the store has not read is gone from
    the topic (retention passed): ``stop`` names the lost ranges; ``skip`` goes on from the
    earliest offsets and records the skipped ranges in the table's commit. ``batch_path``:
    docs/scaling.md."""

    checkpoint: Location
    trigger: DurationMs = 2_000
    #: The records a micro-batch may take: a number, or ``auto``: ``batch_bytes`` in records
    #: of the size the input's newest records have at start, plus 256 B (``ttl.batch_size``).
    max_offsets_per_trigger: Annotated[Annotated[int, Field(gt=0)] | Literal["auto"],
                                       BeforeValidator(_records_or_auto)] = "auto"
    batch_bytes: int = Field(default=256 * 2**20, gt=0)
    on_lost_input: Literal["stop", "skip"] = "stop"
    #: Where a batch is folded (``ttl.store.distributed``): ``driver`` (collected to the
    #: driver as Arrow: the fastest in local mode and for small batches), ``executors``
    #: (the records stay there; the driver gets figures and the change rows to publish),
    #: or ``auto``: the executors
    #: on a cluster master for a batch of at least ``executor_min_records``.
    batch_path: Literal["auto", "driver", "executors"] = "auto"
    executor_min_records: int = Field(default=20_000, gt=0)


def key_filter_fpp(text: str) -> float:
    """``KEY_FILTER_FPP``'s value: a rate above 0 and at most 1 (1: no filter)."""
    try:
        fpp = float(text)
    except ValueError:
        fpp = -1.0
    if not 0 < fpp <= 1:
        raise ValueError(f"{KEY_FILTER_FPP} must be a number above 0 and at most 1, "
                         f"not {text!r}")
    return fpp


def switch(name: str, text: str) -> bool:
    """An on/off Spark setting of ttl's: ``true`` or ``false``, any case."""
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{name} must be true or false, not {text!r}")
    return value == "true"


class SparkConfig(_Section):
    """Where the jobs run. ``packages`` are extra Maven coordinates a profile needs on top of
    Delta and the Kafka connector (e.g. hadoop-aws and Delta's DynamoDB log store for S3);
    ``deploy/submit`` passes them as ``--packages``. ttl's own settings among ``settings``
    are checked here, at load, not at the batch that first reads them."""

    master: str = "local[*]"
    app_name: str = "ttl"
    packages: list[str] = Field(default_factory=list)
    settings: dict[str, str] = Field(default_factory=dict)

    @field_validator("settings")
    @classmethod
    def _ttl_settings(cls, settings: dict[str, str]) -> dict[str, str]:
        if KEY_FILTER_FPP in settings:
            key_filter_fpp(str(settings[KEY_FILTER_FPP]))
        if KEY_FILTER_ENABLED in settings:
            switch(KEY_FILTER_ENABLED, str(settings[KEY_FILTER_ENABLED]))
        return settings


class DrillConfig(_Section):
    """Restore drills: ``interval`` on the ``ttl schedule`` daemon (``None``: only when run
    by hand). ``scratch`` is where drills write their scratch tables, one fresh directory
    each, removed afterwards: on the store's file system, because the executors write them
    (a driver's /tmp is not theirs on a cluster). Unset: ``<store path>_drill_scratch``
    (``ttl.drill.scratch_root``); a relative path resolves as ``store.path`` does."""

    interval: DurationMs | None = None
    scratch: Location | None = None

    @field_validator("scratch", mode="before")
    @classmethod
    def _scratch_not_blank(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("a blank path would mean the working directory; leave "
                             "drill.scratch unset for the default beside the store")
        return value


_HOST_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def host_or_ip(raw: Any) -> Any:
    """An IP address or an RFC 1123 host name; anything else is refused at load (a typo
    would otherwise surface only when the stream starts serving, or bind somewhere
    unexpected)."""
    if not isinstance(raw, str):
        return raw  # pydantic names the wrong type
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        pass
    labels = raw.split(".")
    if (len(raw) <= 253 and all(_HOST_LABEL.match(label) for label in labels)
            and not labels[-1].isdigit()):  # all digits: a mistyped IPv4 address
        return raw
    raise ValueError(f"{raw!r} is neither an IP address nor a host name")


class MetricsConfig(_Section):
    """The driver's Prometheus endpoint (``/metrics``); ``port`` unset: no endpoint.
    ``address`` is where it listens: every interface by default (a cluster's scraper and
    Kubernetes' probes reach the driver from outside), ``127.0.0.1`` in the local profile
    (nothing outside the machine needs a laptop's metrics)."""

    port: int | None = Field(default=None, ge=1, le=65535)
    address: Annotated[str, BeforeValidator(host_or_ip)] = "0.0.0.0"


class Config(_Section):
    store: StoreConfig
    kafka: KafkaConfig
    changelog: ChangelogConfig = ChangelogConfig()
    eviction: EvictionConfig = EvictionConfig()
    maintenance: MaintenanceConfig = MaintenanceConfig()
    drill: DrillConfig = DrillConfig()
    stream: StreamConfig
    spark: SparkConfig = SparkConfig()
    metrics: MetricsConfig = MetricsConfig()
    source: SkipJsonSchema[str] = "<memory>"  # the file it came from, for messages


def json_schema() -> dict[str, Any]:
    """The profile's JSON Schema (``ttl config schema``; ``conf/profile.schema.json``), for
    editors and CI checks of profiles."""
    schema = Config.model_json_schema(mode="validation")
    schema["title"] = "ttl profile"
    schema["description"] = ("A ttl store's configuration profile (TOML). "
                             "Validate one with `ttl config check --conf FILE`.")
    return schema


def load(path: str | Path) -> Config:
    """Load and validate a TOML profile; errors name the file and the setting."""
    file = Path(path)
    try:
        with file.open("rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"configuration file {file} does not exist") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{file}: not valid TOML: {exc}") from None
    return from_dict(raw, source=str(file))


def from_dict(raw: dict[str, Any], source: str = "<memory>") -> Config:
    try:
        return Config.model_validate({**raw, "source": source})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}{_did_you_mean(err)}"
            for err in exc.errors()
        )
        raise ConfigError(f"{source}: invalid setting {problems}") from None


def _did_you_mean(err: dict) -> str:
    """For an unknown key, the closest known key of its section (a misspelling)."""
    import difflib

    if err.get("type") != "extra_forbidden":
        return ""
    model: Any = Config
    for part in err["loc"][:-1]:
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        annotation = getattr(field, "annotation", None)
        candidates = [a for a in (annotation, *getattr(annotation, "__args__", ()))
                      if isinstance(a, type) and issubclass(a, BaseModel)]
        if not candidates:
            return ""
        model = candidates[0]
    known = [k for k in model.model_fields if k != "source"]
    close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def read_spark_defaults(path: Path = SPARK_DEFAULTS) -> dict[str, str]:
    """Parse a ``spark-defaults.conf`` (``key  value`` per line, or ``key=value`` as in any
    Java properties file; ``#`` comments).

    Under spark-submit the package may run from a shipped wheel without ``conf/``; the
    defaults then came with ``--properties-file`` already, so a missing file is no settings.
    """
    settings: dict[str, str] = {}
    if not path.exists():
        return settings
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        # A Java properties file: the key ends at the first blank, ``=`` or ``:``.
        entry = re.match(r"([^\s=:]+)\s*[=:]?\s*(.*)", line)
        if entry:
            settings[entry.group(1)] = entry.group(2).strip()
    return settings


def declared_settings(conf: SparkConfig) -> dict[str, str]:
    """The Spark settings a profile declares: ``conf/spark-defaults.conf``, then the
    profile's own (what ``session_settings`` starts from, before ttl's)."""
    return {**read_spark_defaults(), **conf.settings}
