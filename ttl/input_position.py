"""Where a stream may resume its input: rules over plain offsets, so they have fast tests.

Positions are per input partition (``"0"``, ``"1"``, ...) the offset of the next record to
read. The table records the position its state includes (each batch commit, a restore, a
skip of lost input); Spark's checkpoint records where its next batch starts. They agree,
except that:

* the checkpoint may be **behind** the table by the one batch committed to Delta before
  Spark's checkpoint recorded it (a crash in between): the replay of that batch is skipped
  by Delta's txn id; anything else behind is a regressed checkpoint (``CheckpointRegressed``,
  checked per batch in ``ttl.stream``);
* the checkpoint may be **ahead** of the table: a table restored from the changelog (or put
  back) holds the input up to an earlier position, and resuming at the checkpoint would
  skip every record in between. Only offsets that hold no record (transaction markers) may
  lie in between (``gaps_ahead``); a restore that recorded no position (a point in time, a
  changelog without progress) leaves the gap unknown, so any checkpoint from before it is
  refused (``CheckpointAhead``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ttl.names import OP_INPUT_SKIPPED, OP_RESTORE


def gaps_ahead(checkpoint: dict[str, int], table: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Per partition the offsets ``[table, checkpoint)`` a resume at ``checkpoint`` would
    skip; partitions the table records no position for are not judged (a table that never
    read them resumes them where the checkpoint says)."""
    return {p: (table[p], c) for p, c in sorted(checkpoint.items())
            if p in table and c > table[p]}


def describe(gaps: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"partition {p} offsets {a}..{b - 1}" for p, (a, b) in gaps.items())


def lost(resume: dict[str, int], earliest: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Per partition the offsets ``[resume, earliest)`` the topic no longer holds: input the
    store has not read and retention removed. ``earliest``: each partition's first offset."""
    return {p: (resume[p], low) for p, low in sorted(earliest.items())
            if p in resume and resume[p] < low}


def resume_at(table: dict[str, int], checkpoint: dict[str, int] | None) -> dict[str, int]:
    """Where a run resumes: the checkpoint's offsets where it names a partition (Spark
    resumes from them), the table's elsewhere."""
    return dict(table) if checkpoint is None else {**table, **checkpoint}


@dataclass(frozen=True)
class Recorded:
    """The input position a table's commits record (newest first, ``recorded``)."""

    position: dict[str, int]
    #: (query id, batch id) of the newest commit when a batch made it: its replay passes.
    last_batch: tuple[str, int] | None
    #: The table holds input, but which is unknown: a restore without a position, or a
    #: table whose commits never recorded one while its log starts at version 0.
    unknown: bool


def recorded(metadata: Iterable[dict], log_from_zero: Callable[[], bool],
             floor: Recorded | None = None) -> Recorded:
    """The position the newest commits record: per partition the newest ``input_offsets``
    naming it, back to the last whole position (a restore's, a skip's, a batch's that
    recorded every partition). ``metadata``: the engine commits that record a position or
    are restores, newest first; ``log_from_zero``: whether the log still holds version 0
    (asked only when no commit records a position: a new table, not one whose batch
    commits aged out). ``floor``: what the commits up to the version the table's floor
    covers recorded (``to_property``), read in place of those commits: ``metadata`` then
    holds only the commits after that version, and the floor is the oldest whole position
    (the log's clean-up may have removed the commits it was read from)."""
    position: dict[str, int] = {}
    last_batch, unknown, seen = None, False, False
    for i, meta in enumerate(metadata):
        seen = True
        if i == 0 and meta.get("query_id") is not None and meta.get("batch_id") is not None:
            last_batch = (str(meta["query_id"]), int(meta["batch_id"]))
        if i == 0 and meta.get("op") == OP_RESTORE and not meta.get("input_offsets"):
            unknown = True  # restored with no input position
        for p, o in (meta.get("input_offsets") or {}).items():
            position.setdefault(str(p), int(o))
        if meta.get("op") in (OP_RESTORE, OP_INPUT_SKIPPED) or meta.get("whole_position"):
            break
    else:
        if floor is not None:
            for p, o in floor.position.items():
                position.setdefault(p, o)
            if not seen:
                last_batch, unknown = floor.last_batch, floor.unknown
        else:
            # A checkpoint with batches on a table that never recorded a position was
            # another table's, and says nothing of what this one holds.
            unknown = not position and log_from_zero()
    return Recorded(position, last_batch, unknown)


def to_property(found: Recorded, through: int) -> str:
    """``found``, the position the commits up to version ``through`` record, as the table
    property that keeps it past the log's clean-up. The version goes inside: an engine
    that does not know the property raises the stream-time floor's version without it."""
    return json.dumps({"through": through, "position": found.position,
                       "last_batch": list(found.last_batch) if found.last_batch else None,
                       "unknown": found.unknown}, sort_keys=True, separators=(",", ":"))


def from_property(raw: str | None) -> tuple[Recorded, int] | None:
    """The position ``to_property`` wrote and the version it covers, or ``None`` for none
    (or one this engine cannot read, which then counts as absent: the commits are read as
    before)."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
        batch = doc.get("last_batch")
        through = int(doc["through"])
        return (Recorded({str(p): int(o) for p, o in (doc.get("position") or {}).items()},
                         (str(batch[0]), int(batch[1])) if batch else None,
                         bool(doc.get("unknown"))), through)
    except (ValueError, TypeError, AttributeError, IndexError, KeyError):
        return None


def regressed(starts: dict[str, int], ends: dict[str, int], position: dict[str, int],
              last_batch: tuple[str, int] | None, query_id: str,
              batch_id: int) -> dict[str, tuple[int, int]]:
    """Per partition (first offset, applied up to) where a batch re-reads input the table
    has applied; empty when it does not, or when it is the replay of the batch that
    recorded the position (same query, a batch id up to it, nothing beyond the position:
    Delta's txn id skips it). ``starts``/``ends``: the batch's first and next offsets."""
    behind = {p: (o, position[p]) for p, o in starts.items()
              if p in position and o < position[p]}
    if not behind:
        return {}
    replay = (last_batch is not None and last_batch[0] == query_id
              and batch_id <= last_batch[1]
              and all(o <= position.get(p, -1) for p, o in ends.items()))
    return {} if replay else behind


def waiting(position: dict[str, int], marks: dict[int, tuple[int, int]]) -> int:
    """How many offsets of the input lie past ``position``, by the partitions' (first,
    end) offsets ``marks`` (a partition never read: from its first)."""
    return sum(max(0, high - max(low, position.get(str(p), low)))
               for p, (low, high) in marks.items())


def starting(position: dict[str, int], partitions: Iterable[int | str]) -> dict[str, int]:
    """Where a new checkpoint starts each partition: right after the input the table
    recorded, else the earliest offset (Kafka's -2)."""
    return {str(p): position.get(str(p), -2) for p in partitions}


def first_offsets(table) -> dict[str, int]:
    """Per input partition of an Arrow batch, the offset of its first record."""
    if table.num_rows == 0:
        return {}
    grouped = table.group_by("partition").aggregate([("offset", "min")])
    return {str(p): int(o) for p, o in zip(grouped["partition"].to_pylist(),
                                            grouped["offset_min"].to_pylist(), strict=True)}


def next_offsets(table) -> dict[str, int]:
    """Per input partition of an Arrow batch, the offset after its last record."""
    if table.num_rows == 0:
        return {}
    grouped = table.group_by("partition").aggregate([("offset", "max")])
    return {str(p): int(o) + 1 for p, o in zip(grouped["partition"].to_pylist(),
                                                grouped["offset_max"].to_pylist(), strict=True)}
