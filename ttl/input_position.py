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


def gaps_ahead(checkpoint: dict[str, int], table: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Per partition the offsets ``[table, checkpoint)`` a resume at ``checkpoint`` would
    skip; partitions the table records no position for are not judged (a table that never
    read them resumes them where the checkpoint says)."""
    return {p: (table[p], c) for p, c in sorted(checkpoint.items())
            if p in table and c > table[p]}


def describe(gaps: dict[str, tuple[int, int]]) -> str:
    return ", ".join(f"partition {p} offsets {a}..{b - 1}" for p, (a, b) in gaps.items())
