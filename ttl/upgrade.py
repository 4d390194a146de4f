"""Format upgrades v1 (key, value) / v2 (key, value, ts) -> v3 (docs/semantics.md).

**In place**, in idempotent steps, so a half-done upgrade is resumed by running it again:

1. record the version before the upgrade (``ttl.upgrade.from_version``) - the rollback point;
2. add the missing v3 columns (Delta schema evolution) and turn on the change data feed;
3. backfill in one UPDATE: legacy values get empty headers (as in the headers KIP); a missing
   timestamp (v1, or a NULL / -2^63 ``ts`` in v2) becomes the **upgrade's wall-clock time**,
   so no legacy entry expires the moment it is upgraded (it gets one full TTL from now);
   ``expires_at`` = ts + store TTL (saturating), ``key_hash``, ``updated_at`` = now;
4. mark the table v3 (``ttl.format.version``, store name, TTL): only now does the engine open
   it. ``rollback`` restores the recorded version with Delta's RESTORE (data and schema).

**Roll-over**: restore a v3 table from the store's existing changelog into a new location
(``ttl restore --target NEW [--converter plain]`` for a changelog without engine headers),
drill it, then switch the profile's ``store.path`` to it; the old table stays untouched.
"""

from __future__ import annotations

import logging

from ttl import delta_log
from ttl.bars import bar
from ttl.clock import Clock, WallClock
from ttl.config import Config
from ttl.errors import LayoutError
from ttl.names import PROP_FORMAT
from ttl.names import PROP_UPGRADE_FROM as PROP_FROM_VERSION
from ttl.store import layout
from ttl.timestamps import NO_TIMESTAMP, expiry_column

log = logging.getLogger(__name__)

V3_COLUMNS = {
    "ts": "BIGINT", "headers": layout.HEADERS_TYPE, "expires_at": "BIGINT",
    "updated_at": "BIGINT", "key_hash": "BIGINT", "record_ttl": "BIGINT",
}


def detect(spark, path: str) -> int:
    """The table's layout version: 3 if marked, else 1 or 2 from its columns."""
    props = delta_log.properties(spark, path)
    if PROP_FORMAT in props:
        return int(props[PROP_FORMAT])
    columns = spark.read.format("delta").load(path).columns
    found = layout.legacy_version([c for c in columns if c not in V3_COLUMNS or c == "ts"])
    if found is None:
        raise LayoutError(f"table {path} has an unknown layout: columns {columns}")
    return found


def upgrade_in_place(spark, conf: Config, *, clock: Clock | None = None) -> str:
    """Steps 1-4 of the module docstring; each is idempotent, so a rerun resumes."""

    path, ttl = conf.store.path, conf.store.ttl
    if detect(spark, path) == 3:
        return f"{path} is already format v3"
    with bar(4, f"upgrade {conf.store.name}", unit="steps") as steps:
        return _upgrade_steps(spark, conf, path, ttl, (clock or WallClock()).now_ms(), steps)


def _upgrade_steps(spark, conf: Config, path: str, ttl: int | None, now: int, steps) -> str:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    props = delta_log.properties(spark, path)
    if PROP_FROM_VERSION not in props:
        version = delta_log.latest_version(spark, path)
        layout.set_properties(spark, path, {PROP_FROM_VERSION: str(version)})
    steps.update(1)
    existing = set(spark.read.format("delta").load(path).columns)
    missing = [f"{c} {t}" for c, t in V3_COLUMNS.items() if c not in existing]
    if missing:
        spark.sql(f"ALTER TABLE delta.`{path}` ADD COLUMNS ({', '.join(missing)})")
    layout.set_properties(spark, path, {"delta.enableChangeDataFeed": "true"})
    steps.update(1)
    ts = (F.when(F.col("ts").isNull() | (F.col("ts") == F.lit(NO_TIMESTAMP)), F.lit(now))
          .otherwise(F.col("ts")).cast("bigint"))
    DeltaTable.forPath(spark, path).update("key_hash IS NULL", {
        "headers": F.coalesce(F.col("headers"), F.array().cast(layout.HEADERS_TYPE)),
        "expires_at": expiry_column(ts, F.lit(ttl).cast("bigint")),
        "ts": ts, "key_hash": F.xxhash64("key"), "updated_at": F.lit(now).cast("bigint")})
    steps.update(1)
    marks = layout.store_properties(conf.store.name, ttl)
    marks.pop("delta.enableDeletionVectors")  # turning DVs on needs a protocol upgrade
    layout.set_properties(spark, path, marks)
    steps.update(1)
    return f"{path} upgraded in place to format v3 (missing timestamps backfilled with {now})"


#: The commits an in-place upgrade makes (steps 1-4, and the OPTIMIZE of the layout that
#: ``ttl upgrade`` makes after them, which changes no row); any other after it is a use.
_UPGRADE_STEPS = {"SET TBLPROPERTIES", "ADD COLUMNS", "UPDATE", "OPTIMIZE"}


def _writes_since_upgrade(spark, path: str, from_version: int) -> list[str]:
    """The commits after a completed upgrade that are not its own steps (``version op``).

    The upgrade made property changes, column additions and one backfill UPDATE, in that
    order, and its last commit marked the table v3. Anything else after ``from_version``
    (a batch, a sweep, a second UPDATE, an engine commit) means the store was used."""
    found, updates = [], 0
    latest = delta_log.latest_version(spark, path)
    for version in range(from_version + 1, latest + 1):
        info = delta_log.commit_info(spark, path, version)
        if info is None:  # the log no longer holds it: cannot prove it was a step
            found.append(f"{version} (gone from the log)")
            continue
        updates += info.operation == "UPDATE"
        if (info.operation not in _UPGRADE_STEPS or info.metadata is not None
                or updates > 1):
            found.append(f"{version} {info.operation}")
    return found


def rollback(spark, conf: Config) -> str:
    """Undo a (possibly half-done) in-place upgrade: RESTORE the version recorded before it.

    A completed upgrade (the table is marked v3) that the store has used since is refused:
    RESTORE would discard every write after the upgrade. A half-done one is never in use
    (the engine opens only a marked table)."""
    path = conf.store.path
    version = delta_log.properties(spark, path).get(PROP_FROM_VERSION)
    if version is None:
        return f"{path}: no in-place upgrade to roll back"
    if detect(spark, path) == 3:
        used = _writes_since_upgrade(spark, path, int(version))
        if used:
            raise LayoutError(
                f"{path}: the upgrade completed and the store has been written since "
                f"(versions {', '.join(used[:5])}{', ...' if len(used) > 5 else ''}); a "
                f"rollback to version {version} would discard those writes. Operator action: "
                "keep the v3 table; to get a legacy copy, read it with time travel "
                f"(VERSION AS OF {version}) into another path")
    spark.sql(f"RESTORE TABLE delta.`{path}` TO VERSION AS OF {int(version)}")
    return f"{path} rolled back to version {version} (its layout before the upgrade)"
