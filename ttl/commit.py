"""Commit metadata: what every engine commit says about itself, and how it is attached.

Every engine commit carries a JSON ``userMetadata`` document, atomic with the data::

    {"ttl": 1, "op": "batch" | "sweep" | ..., "store": NAME, "stream_time": MS | null,
     "t0": MS, "clock": "wall" | "stream" | "both", "wall": MS, ...op-specific keys}

Batch commits add ``expired_keys`` (hex keys removed as expired-on-arrival, so the changelog
can tag their tombstones ``ttl.op=expire``) and whatever the caller passes (for example the
input offsets the batch consumed). Reading it back is ``ttl.delta_log``'s job.

MERGE and DELETE take ``userMetadata`` and the idempotent-write ``txnAppId``/``txnVersion``
only as *session* settings, which stay set after the commit: ``commit_settings`` sets them
for one operation and always unsets them. Each writer thread must use its own
``spark.newSession()`` (settings are shared by a session's threads).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager

USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"


def encode(metadata: dict) -> str:
    return json.dumps({"ttl": 1, **metadata}, sort_keys=True, separators=(",", ":"))


def decode(raw: str | None) -> dict | None:
    """The engine metadata of a commit, or ``None`` for commits made by others."""
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) and doc.get("ttl") == 1 else None


@contextmanager
def commit_settings(spark, metadata: dict,
                    txn: tuple[str, int] | None = None) -> Iterator[None]:
    """Set userMetadata (and the idempotent txn id) for exactly one commit of ``spark``."""
    conf = spark.conf
    conf.set(USER_METADATA, encode(metadata))
    if txn is not None:
        conf.set(TXN_APP_ID, txn[0])
        conf.set(TXN_VERSION, str(txn[1]))
    try:
        yield
    finally:
        conf.unset(USER_METADATA)
        conf.unset(TXN_APP_ID)
        conf.unset(TXN_VERSION)
