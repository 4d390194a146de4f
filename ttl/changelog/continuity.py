"""Whether a table continues the changelog's progress: the rule a publisher checks first.

The publisher resumes at the version after its progress (``progress.version - offset + 1``).
That is only right for the table the progress was published from. A store directory that
was lost and created again at the same path starts its versions again at 0, below the
progress: nothing of it would ever be published, while every lag figure said 0. So the
progress names the table it was published from (its Delta table id), and a publisher
refuses a table that neither is that table nor was restored to continue it:

* **the same table** (or a progress written before progress named tables): its newest
  version must not be below the progress; a table whose versions went back lost commits
  (a backup put back, its log cut) and would publish under versions the changelog has;
* **another table, restored from this changelog** (``ttl restore`` marks the changelog
  version its state is at: ``ttl.changelog.continues_after``): it continues the changelog
  if nothing was published after that mark; else the old table went on publishing after
  the restore read the changelog, and the restored one lacks those changes;
* **another table, restored from a point in time or another topic** (re-seed required):
  only ``ttl publish --reseed`` may take it over, publishing its whole state;
* **any other table** (created empty at the path, or a foreign one): refused.

Pure functions over plain values, so the rule has fast unit tests; ``Publisher`` and
``ttl status`` apply it.
"""

from __future__ import annotations

from dataclasses import dataclass

from ttl.names import (
    PROP_CONTINUES_AFTER,
    PROP_RESEED_REQUIRED,
    PROP_RESTORE_PENDING,
    PROP_VERSION_OFFSET,
)


@dataclass(frozen=True)
class TableAtPath:
    """What the rule needs to know of the table a profile points at."""

    path: str
    table_id: str
    newest: int  # its newest version on the changelog's scale (Delta version + offset)
    continues_after: int | None  # the changelog version a restore of it continues after
    reseed_required: bool
    offset: int = 0  # its version offset: changelog version = Delta version + offset
    restore_pending: bool = False  # a restore created it and has not finished writing it


@dataclass(frozen=True)
class PublishedSoFar:
    """What the changelog's progress says was published."""

    topic: str
    version: int  # -1: nothing yet
    table_id: str | None  # None: written before progress named tables


def table_at_path(path: str, table_id: str, newest_delta_version: int,
                  properties: dict[str, str]) -> TableAtPath:
    """The rule's view of a table, from its id, newest Delta version and properties (read
    with Spark or delta-rs alike)."""

    offset = int(properties.get(PROP_VERSION_OFFSET) or 0)
    raw = properties.get(PROP_CONTINUES_AFTER)
    return TableAtPath(path, table_id, newest_delta_version + offset,
                       int(raw) if raw not in (None, "") else None,
                       properties.get(PROP_RESEED_REQUIRED) == "true", offset,
                       properties.get(PROP_RESTORE_PENDING) == "true")


RESTORE_ACTION = (
    "if the table was lost or replaced, move whatever is at the path away (keep it until "
    "the rebuilt store is checked) and rebuild the store from its changelog with `ttl "
    "restore --conf PROFILE`; if the profile points at the wrong place, fix store.path")


def refusal(table: TableAtPath, published: PublishedSoFar) -> str | None:
    """Why a publisher must not continue ``published`` from ``table``, or ``None`` when it
    may. The text names the operator's action."""
    if table.restore_pending:
        return (f"a restore into {table.path} did not finish (ttl.restore.pending): it holds "
                f"no store yet. Operator action: run `ttl restore --conf PROFILE` again")
    if published.version < 0:
        return None  # nothing published yet: any table starts the changelog
    same = published.table_id is None or published.table_id == table.table_id
    if same:
        if table.newest >= published.version:
            return None
        return (f"the changelog {published.topic} holds versions up to {published.version} "
                f"but the table at {table.path} ends at version {table.newest}: the table "
                f"lost commits (put back from a backup?), so its next versions would be "
                f"published under numbers the changelog already has. Operator action: "
                f"{RESTORE_ACTION}")
    if table.continues_after is not None:
        if published.version <= table.continues_after:
            return None
        return (f"the table at {table.path} was restored from the changelog "
                f"{published.topic} at version {table.continues_after}, but the changelog "
                f"has since been published up to version {published.version} by table "
                f"{published.table_id}: the restored table lacks those changes. Operator "
                f"action: run `ttl restore --conf PROFILE` again now that the old table no "
                f"longer publishes")
    if table.reseed_required:
        return None  # only ``--reseed`` may publish it: ``publish`` refuses (ReseedRequired)
    return (f"the table at {table.path} (Delta table id {table.table_id}) is not the table "
            f"the changelog {published.topic} was published from (id {published.table_id}, "
            f"up to version {published.version}), and no restore made it: it was created "
            f"again at that path or replaced, and publishing it would leave the changelog "
            f"silently behind. Operator action: {RESTORE_ACTION}")


def reseed_offset(newest_delta_version: int, offset: int, published_version: int) -> int:
    """The version offset a re-seed publishes under: its snapshot's changelog version must
    come after everything on the changelog (drills and point-in-time restores select by
    version), so it is raised when ``newest_delta_version + offset`` would not."""
    if newest_delta_version + offset > published_version:
        return offset
    return published_version + 1 - newest_delta_version
