"""``ttl status``, ``get``, ``scan`` and ``health``: answers about a store without Spark.

Starting Spark costs tens of seconds; an operator's question ("is it healthy, how far
behind, what is this key") should cost about one. delta-rs (the ``deltalake`` package) reads
the Delta log and the tables directly: its log reads give versions, commit metadata and
table properties (stream time, the last sweep, the changelog's version offset), and its SQL
engine (DataFusion, which applies deletion vectors) counts and looks up rows with the
live-entries filter. Spark stays the only writer; this module never writes.

It reads the same commit metadata ``ttl.delta_log`` reads for the engine (the JSON
``userMetadata`` of ``ttl.commit``), through delta-rs instead of Spark.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone

import pyarrow as pa
import pyarrow.compute as pc

from ttl import commit, delta_rs
from ttl.changelog import continuity
from ttl.changelog.format import table_version
from ttl.changelog.progress import published_progress
from ttl.clock import batch_clock, recovered_stream_time, stream_time_floor, wall_ms_or_now
from ttl.config import Config
from ttl.display import utc
from ttl.errors import ScanBlocked, StoreMissing
from ttl.lease import LEASE_ID
from ttl.names import (
    LEASE_SUFFIX,
    OP_SWEEP,
    progress_topic,
    sibling,
)
from ttl.record import Headers
from ttl.store import lookup
from ttl.store.layout import key_hashes

#: The status's raw values that its human lines fold into sentences (``to_json`` reads them).
_RAW = "_raw"

#: Commits read back at least, for the last sweep (newest first).
HISTORY = 200

#: The changelog lag ``status`` reports when the brokers answer but the changelog has no
#: progress topic: nothing says which versions are published (``health`` is unhealthy).
NO_PROGRESS_TOPIC = "unknown (no progress topic)"


def open_table(conf: Config, path: str | None = None):
    """The store's table (or the table at ``path``), read by delta-rs with the profile's
    storage settings (``ttl.delta_rs``); a path that holds none is ``StoreMissing`` (one
    line naming the path and the action), not delta-rs's traceback."""
    from deltalake.exceptions import TableNotFoundError

    path = path or conf.store.path
    try:
        return delta_rs.table(path, delta_rs.profile_options(conf))
    except TableNotFoundError as exc:
        raise StoreMissing(f"no Delta table at store.path {path}") from exc


def query(tables: dict[str, object], sql: str) -> pa.Table:
    """``sql`` over delta-rs tables (by name), with deletion vectors applied."""
    from deltalake import QueryBuilder

    builder = QueryBuilder()
    for name, table in tables.items():
        builder.register(name, table)
    return pa.table(builder.execute(sql).read_all())


_READ = object()  # scan_blocked's checksum: read it


def scan_blocked(table, checksum: dict | None | object = _READ,
                 options: Mapping[str, str] | None = None) -> str | None:
    """Why a delta-rs scan of ``table`` must not run (it would hang: too many files with
    deletion vectors, ``lookup.DELTA_RS_MAX_DV_FILES``, or a checksum that says how many
    could not be read), or ``None``. The count is the version's checksum's (on S3 read
    with delta-rs's storage ``options``; ``lookup.checksum``)."""
    if checksum is _READ:
        checksum = lookup.checksum(table.table_uri, table.version(), options=options)
    if checksum is None:
        return ("unknown (the version's checksum, which says whether delta-rs can scan it, "
                "could not be read)")
    files = checksum.get("numDeletionVectorsOpt")  # type: ignore[union-attr]
    if files is None or files < lookup.DELTA_RS_MAX_DV_FILES:
        return None
    return (f"unknown ({files} files carry deletion vectors; delta-rs cannot read them in "
            "one scan: the next OPTIMIZE folds them in)")


def entry_counts(table, now: int,
                 options: Mapping[str, str] | None = None) -> dict[str, int | str]:
    """``total`` and ``live`` entries at ``now``. Two queries whose cost does not follow
    the table's rows: a plain count (DataFusion answers it from the files' row counts and
    deletion vectors) and a count of the expired entries, which reads only the files whose
    ``expires_at`` statistics reach ``now`` (one ``CASE`` over every row read them all).
    On a table delta-rs cannot scan (``scan_blocked``): the total from the files' row
    counts less the checksum's deleted rows, and ``live`` says why it is unknown.
    ``options``: ``scan_blocked``'s."""
    checksum = lookup.checksum(table.table_uri, table.version(), options=options)  # once
    blocked = scan_blocked(table, checksum)
    if blocked is not None:
        rows = pa.table(table.get_add_actions(flatten=False))["num_records"]
        deleted = (checksum or {}).get("numDeletedRecordsOpt")  # unknown: none counted
        total = (pc.sum(rows).as_py() or 0) - int(deleted or 0)
        return {"total": total, "live": blocked}
    total = query({"store": table}, "SELECT count(*) AS n FROM store").to_pylist()[0]["n"]
    expired = query({"store": table}, "SELECT count(*) AS n FROM store WHERE "
                    f"NOT {_live(now)}").to_pylist()[0]["n"]
    return {"total": total, "live": total - expired}


def _live(now: int) -> str:
    return f"(expires_at IS NULL OR expires_at > {int(now)})"


@dataclass
class StoreView:
    """What a status reads, once: the store table at its latest version."""

    conf: Config
    version: int
    properties: dict[str, str]
    commits: list[dict] = field(default_factory=list)  # newest first, delta-rs history
    table: object | None = None  # the delta-rs table, loaded once for every read

    @classmethod
    def open(cls, conf: Config) -> StoreView:
        table = open_table(conf)
        version, properties = table.version(), dict(table.metadata().configuration)
        through = stream_time_floor(properties, version)[1]
        # The commits the stream-time rule needs (those after the floor's version; all of
        # them on a table whose floor covers none yet), and at least the last HISTORY.
        limit = version + 1 if through is None else max(HISTORY, version - through)
        return cls(conf, version, properties, delta_rs.history(
            table, conf.store.path, limit), table)

    def engine_commits(self):
        for c in self.commits:
            meta = commit.decode(c.get("userMetadata"))
            if meta is not None:
                yield c, meta

    def stream_time(self, changelog: int | None = None) -> int | None:
        """As the engine recovers it (``clock.stream_time_floor``): the floor property, the
        commits after the version it covers, and the changelog's progress."""
        floor, through = stream_time_floor(self.properties, self.version)
        return recovered_stream_time(floor, changelog, *(
            m.get("stream_time") for c, m in self.engine_commits()
            if through is None or c["version"] > through))

    def last_sweep(self) -> dict | None:
        for c, meta in self.engine_commits():
            if meta.get("op") == OP_SWEEP:
                metrics = c.get("operationMetrics") or {}
                at = datetime.fromtimestamp(c["timestamp"] / 1000, timezone.utc)
                return {"version": c["version"], "clock": meta.get("clock"), "t": meta.get("t"),
                        "evicted": int(metrics.get("numDeletedRows", 0)),
                        "at": at.isoformat(timespec="seconds")}
        return None

    def commit_time_s(self, version: int) -> float | None:
        """The commit time of ``version``: from the commits read back, else from the log's
        commits from it on (a read as long as the lag, never the whole log); ``None`` if
        the log no longer has it."""
        commits = self.commits
        if not any(c.get("version") == version for c in commits) and version <= self.version:
            commits = delta_rs.history(self.table, self.conf.store.path,
                                       self.version - version + 1)
        for c in commits:
            if c.get("version") == version and c.get("timestamp") is not None:
                return c["timestamp"] / 1000
        return None


def _changelog_progress(conf: Config, kafka):
    """The changelog's progress (``Progress``), or ``None`` without a changelog position
    (no reachable brokers, no progress topic)."""

    if kafka is None:
        return None
    return published_progress(kafka, progress_topic(conf.kafka.changelog_topic))


def status(conf: Config, kafka=None, *, wall_ms: int | None = None) -> dict[str, object]:
    """``ttl status`` without Spark; ``kafka`` is ``None`` when the brokers are not reachable
    now (the embedded broker runs only inside ``ttl run``)."""
    view = StoreView.open(conf)
    progress = _changelog_progress(conf, kafka)
    wall = wall_ms_or_now(wall_ms)
    stream_time = view.stream_time(progress.stream_time if progress else None)
    now = batch_clock(conf.eviction.clock, wall, stream_time)
    store = view.table
    counts = entry_counts(store, now, delta_rs.profile_options(conf))
    dead = _count(conf, conf.store.dead_letters)
    out: dict[str, object] = {
        "store": conf.store.name, "table": conf.store.path, "table version": view.version,
        "clock": f"{conf.eviction.clock} (now {now})",
        "live entries": counts["live"],
        "expired, not yet swept": (counts["total"] - counts["live"]
                                   if isinstance(counts["live"], int) else counts["live"]),
        "stream time": stream_time, "last sweep": view.last_sweep(), "dead letters": dead,
        "lease": _held(held := lease_holder(conf, wall)),
    }
    out[_RAW] = {"clock": conf.eviction.clock, "now_ms": now, "lease": held}
    if progress is None:
        out["changelog lag (versions)"] = ("unknown (embedded broker not running)"
                                           if kafka is None else NO_PROGRESS_TOPIC)
        return out
    # A table the changelog does not continue (created again at the path...) has no lag:
    # nothing of it is published, and the publisher refuses it.
    why = continuity.refusal(
        continuity.table_at_path(conf.store.path, view.table.metadata().id, view.version,
                                 view.properties),
        continuity.PublishedSoFar(conf.kafka.changelog_topic, progress.highest,
                                  progress.table_id))
    if why is not None:
        out["changelog lag (versions)"] = f"unknown: {why}"
        return out
    published = table_version(progress.version, view.properties)  # a Delta version
    out["published version"] = published
    if progress.ahead:  # publication from the executors, between partitions and progress
        out["changelog partitions ahead"] = ", ".join(
            f"{p}: {table_version(v, view.properties)}" for p, v in sorted(progress.ahead.items()))
    out["changelog lag (versions)"] = max(0, view.version - published)
    if published >= view.version:
        out["changelog lag (seconds)"] = 0.0
        return out
    oldest = view.commit_time_s(published + 1)
    out["changelog lag (seconds)"] = (round(max(0.0, wall / 1000 - oldest), 1)
                                      if oldest is not None else
                                      f"unknown (version {published + 1} is gone from the log)")
    return out


def _count(conf: Config, path: str) -> int:
    """Rows of a sibling table (0 while it does not exist yet)."""
    table = delta_rs.table_if_exists(path, delta_rs.profile_options(conf))
    if table is None:
        return 0
    return query({"t": table}, "SELECT count(*) AS n FROM t").to_pylist()[0]["n"]


def lease_holder(conf: Config, wall_ms: int) -> tuple[str, int] | None:
    """Who holds the lease live and until when (epoch ms), or ``None`` when it is free."""
    table = delta_rs.table_if_exists(sibling(conf.store.path, LEASE_SUFFIX),
                                     delta_rs.profile_options(conf))
    if table is None:
        return None  # nobody ever held it
    # The SQL path: a lease table made before it stopped declaring deletion vectors
    # still reads.
    for row in query({"lease": table}, "SELECT * FROM lease").to_pylist():
        if row["id"] == LEASE_ID and row["owner"] and row["expires_at"] > wall_ms:
            return row["holder"], row["expires_at"]
    return None


def _held(held: tuple[str, int] | None) -> str:
    """``free``, or who holds the lease live and until when (epoch ms)."""
    return "free" if held is None else f"{held[0]} until {held[1]}"


def get(conf: Config, key: bytes, *, wall_ms: int | None = None) -> dict | None:
    """The live entry of ``key`` (value, ts, headers, expires_at), or ``None``."""
    now = store_now(conf, wall_ms)
    table = open_table(conf)
    (key_hash,) = key_hashes(pa.array([key], pa.binary())).to_pylist()
    if lookup.files_to_read(pa.table(table.get_add_actions(flatten=True)),
                            pa.array([key], pa.binary())) >= lookup.DELTA_RS_MAX_DV_FILES:
        _refuse_blocked(table, conf)  # too many files it cannot skip
    rows = query({"store": table},  # key_hash: files skipped by their statistics
                "SELECT value, ts, headers, expires_at FROM store "
                f"WHERE key_hash = {key_hash} AND key = X'{key.hex()}' AND {_live(now)}"
                ).to_pylist()
    return _entry(rows[0]) if rows else None


def _refuse_blocked(table, conf: Config) -> None:
    blocked = scan_blocked(table, options=delta_rs.profile_options(conf))
    if blocked is not None:
        raise ScanBlocked(f"{table.table_uri}: {blocked.removeprefix('unknown (').rstrip(')')}"
                          "; read it with Spark meanwhile (spark.read.format('delta'))")


def scan(conf: Config, limit: int, *, wall_ms: int | None = None) -> list[tuple[bytes, dict]]:
    """Up to ``limit`` live entries in key order."""
    now = store_now(conf, wall_ms)
    table = open_table(conf)
    _refuse_blocked(table, conf)
    rows = query({"store": table},
                f"SELECT key, value, ts, headers, expires_at FROM store WHERE {_live(now)} "
                f"ORDER BY key LIMIT {int(limit)}").to_pylist()
    return [(bytes(r["key"]), _entry(r)) for r in rows]


def store_now(conf: Config, wall_ms: int | None) -> int:
    wall = wall_ms_or_now(wall_ms)
    if conf.eviction.clock == "wall":
        return wall
    view = StoreView.open(conf)
    return batch_clock(conf.eviction.clock, wall, view.stream_time())


def _entry(row: dict) -> dict:
    headers: Headers = tuple((h["key"], None if h["value"] is None else bytes(h["value"]))
                             for h in row["headers"] or ())
    return {"value": bytes(row["value"]), "ts": row["ts"], "headers": headers,
            "expires_at": row["expires_at"]}


@dataclass
class Health:
    ok: bool
    reasons: list[str]

    def line(self) -> str:
        return "healthy" if self.ok else "unhealthy: " + "; ".join(self.reasons)


def health(conf: Config, kafka=None, *, require_stream: bool = False,
           wall_ms: int | None = None) -> Health:
    """A probe's answer: the table reads, the changelog lags less than
    ``maintenance.publisher_max_lag`` (when the brokers are reachable) and, with
    ``require_stream``, a stream holds the lease.

    Reachable brokers without the changelog's progress topic are unhealthy: nothing is
    published (the publisher cannot start without it) and the lag cannot be measured, so
    "healthy" there hid a changelog that never moves."""
    reasons = []
    try:
        out = status(conf, kafka, wall_ms=wall_ms)
    except Exception as exc:  # noqa: BLE001 - any failure to read is the answer
        return Health(False, [f"the store cannot be read: {str(exc).splitlines()[0][:200]}"])
    if out.get("changelog lag (versions)") == NO_PROGRESS_TOPIC:
        reasons.append(f"the changelog {conf.kafka.changelog_topic} has no progress topic "
                       f"{progress_topic(conf.kafka.changelog_topic)}, so nothing is "
                       "published: run `ttl topic create`, then `ttl run`")
    versions = out.get("changelog lag (versions)")
    if isinstance(versions, str) and versions.startswith("unknown: "):
        reasons.append(f"the changelog lag is {versions}")  # the table it does not continue
    lag = out.get("changelog lag (seconds)")
    limit = conf.maintenance.publisher_max_lag / 1000
    if isinstance(lag, float) and lag > limit:
        reasons.append(f"the changelog lags {lag:.0f} s, more than "
                       f"maintenance.publisher_max_lag ({limit:.0f} s)")
    elif isinstance(lag, str):
        reasons.append(f"the changelog lag is {lag}")
    if require_stream and out["lease"] == "free":
        reasons.append("no stream holds the store's lease")
    return Health(not reasons, reasons)


#: ``ttl status --json``: each human label's key, for machines (snake case, units named).
JSON_KEYS = {
    "store": "store", "table": "table", "table version": "table_version",
    "live entries": "live_entries", "expired, not yet swept": "expired_not_swept",
    "stream time": "stream_time_ms", "last sweep": "last_sweep", "dead letters": "dead_letters",
    "published version": "published_version",
    "changelog lag (versions)": "changelog_lag_versions",
    "changelog lag (seconds)": "changelog_lag_seconds",
}


def machine(out: dict[str, object]) -> dict[str, object]:
    """The status for machines: snake-case keys, every figure a number or null (never a
    sentence), and why a figure is null under ``unknown`` (e.g. the changelog lag while the
    brokers are unreachable)."""
    raw = out.get(_RAW, {})
    doc: dict[str, object] = {"clock": raw.get("clock"), "now_ms": raw.get("now_ms")}
    unknown: dict[str, str] = {}
    for label, key in JSON_KEYS.items():
        if label not in out:
            continue
        value = out[label]
        if isinstance(value, str) and key not in ("store", "table"):
            reason = value.removeprefix("unknown").strip().removeprefix(":").strip()
            if reason.startswith("(") and reason.endswith(")"):
                reason = reason[1:-1]
            unknown[key] = reason or "unknown"
            value = None
        doc[key] = value
    held = raw.get("lease")
    doc["lease"] = None if held is None else {"holder": held[0], "until_ms": held[1]}
    doc["unknown"] = unknown
    return doc


def to_json(out: dict[str, object]) -> str:
    return json.dumps(machine(out), sort_keys=True, default=str)


def human(out: dict[str, object]) -> list[str]:
    """One aligned line per field; the last sweep as a sentence, not a dict."""
    lines = []
    for key, value in out.items():
        if key == _RAW:
            continue
        if key == "last sweep" and isinstance(value, dict):
            value = (f"version {value['version']}: {value['clock']} clock at T={value['t']} "
                     f"({utc(value['t'])}), evicted {value['evicted']}, at {value['at']}")
        elif key == "stream time" and isinstance(value, int):
            value = f"{value} ({utc(value)})"
        lines.append(f"{key:>26}: {'none' if value is None else value}")
    return lines
