"""How many input records a micro-batch may take (``stream.max_offsets_per_trigger``).

A batch's fixed costs (planning and scheduling its Spark jobs, Delta's commit and the
snapshot after it, a changelog transaction) are paid per batch, so a stream that is behind
goes faster with larger batches: batches of 695k records ran 1.49x (new keys) and 1.87x
(updates) the records/s of 100k ones here (docs/performance.md, Batch size). A stream
that is caught up takes what arrived since its last trigger whatever the bound, so a large
bound costs it nothing. What bounds a batch is memory: on the driver's path the whole batch
is read into the driver (Arrow), and Spark refuses to collect more than
``spark.driver.maxResultSize``.

So under ``auto`` (the default) the bound is set in bytes, ``stream.batch_bytes``, and
turned into records at each start from the average size of the input's newest records
(keys, values and headers) plus ``RECORD_OVERHEAD_BYTES``: what a record costs whatever
its size (its offsets, timestamps and partition in the Arrow batch, its place in the
fold's columns), so a stream of tiny records does not take millions of them. Where
batches are read into the driver it is also kept to half of ``spark.driver.maxResultSize``.
Pure functions: the stream samples, these decide.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A record's size assumed when the input holds none to sample (a new topic).
UNSAMPLED_RECORD_BYTES = 1024
#: Bytes a record weighs beyond its key, value and headers. The driver's Python held
#: about 700 B a record more for a batch of 1.5M records of 130 B than for 100k-record
#: batches (docs/performance.md, Batch size); counting 256 B of that beside the record's
#: own bytes keeps a budget of 256 MiB of such records to about 700k of them, which held
#: about 0.35 GB more there than batches of 100k.
RECORD_OVERHEAD_BYTES = 256
#: Bounds on the records a batch may take under ``auto``, whatever the sizes say: a
#: batch of tiny records still pays per record, and a batch of huge ones still moves on.
MIN_RECORDS = 1_000
MAX_RECORDS = 10_000_000
#: The share of ``spark.driver.maxResultSize`` a batch read into the driver may take.
RESULT_SHARE = 0.5
#: What a record's Arrow form adds to its bytes in the collected batch: its topic,
#: partition, offset, timestamps and the offsets of its variable-length columns.
ARROW_RECORD_BYTES = 64

_UNITS = {"": 1, "b": 1, "k": 2**10, "kb": 2**10, "m": 2**20, "mb": 2**20, "g": 2**30,
          "gb": 2**30, "t": 2**40, "tb": 2**40, "p": 2**50, "pb": 2**50}


def spark_bytes(text: str) -> int:
    """A Spark size setting (``1g``, ``512m``, ``1048576``) in bytes; ``0`` is unlimited."""
    m = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if m is None or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a Spark size: {text!r}")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


@dataclass(frozen=True)
class Sample:
    """The input's newest records as read at start: how many, and their bytes."""

    records: int
    bytes: int

    @property
    def record_bytes(self) -> float:
        return self.bytes / self.records if self.records else float(UNSAMPLED_RECORD_BYTES)


@dataclass(frozen=True)
class Bound:
    """A batch's bound in records, and why (for the start-up's log line)."""

    records: int
    why: str


def bound(batch_bytes: int, sample: Sample, *, max_result_bytes: int | None) -> Bound:
    """Records per batch for ``batch_bytes``, records weighing ``sample``'s average size
    plus ``RECORD_OVERHEAD_BYTES``, between ``MIN_RECORDS`` and ``MAX_RECORDS``.
    ``max_result_bytes``: ``spark.driver.maxResultSize`` when a batch may be read into the
    driver (``None`` when none is, or ``0``: unlimited); its half is never exceeded, not
    even for ``MIN_RECORDS``: a batch over it fails (and would again at every start)."""
    size = max(1.0, sample.record_bytes)
    records = int(batch_bytes / (size + RECORD_OVERHEAD_BYTES))
    named = f"stream.batch_bytes {_size(batch_bytes)}"
    if records < MIN_RECORDS:
        records, named = MIN_RECORDS, f"at least {MIN_RECORDS:,} records"
    elif records > MAX_RECORDS:
        records, named = MAX_RECORDS, f"at most {MAX_RECORDS:,} records"
    most = driver_records(sample, max_result_bytes)
    if most is not None and records > most:
        records = most
        named = f"half of spark.driver.maxResultSize ({_size(max_result_bytes or 0)})"
    seen = (f"{size:,.0f} B + {RECORD_OVERHEAD_BYTES} B a record, over the input's newest "
            f"{sample.records:,}" if sample.records else
            f"{UNSAMPLED_RECORD_BYTES:,} B + {RECORD_OVERHEAD_BYTES} B a record assumed (no "
            "records sampled)")
    return Bound(records, f"{named}, at {seen}")


def driver_records(sample: Sample, max_result_bytes: int | None) -> int | None:
    """The most records of ``sample``'s size a batch read into the driver may hold: half
    of ``spark.driver.maxResultSize`` in their Arrow form (``None``: no limit)."""
    if not max_result_bytes:
        return None
    weight = max(1.0, sample.record_bytes) + ARROW_RECORD_BYTES
    return max(1, int(max_result_bytes * RESULT_SHARE / weight))


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"
