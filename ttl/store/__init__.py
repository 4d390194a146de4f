"""The timestamped store on Delta Lake (docs/semantics.md: data model, writes, expiry).

``DeltaStore`` is imported on first use: executors import ``ttl.store.fold`` (the batch on
the executors, ``ttl.store.executor_fold``), and this package must not pull the driver's
modules (configuration and pydantic, the Kafka and delta-rs clients) into them with it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ttl.store.store import DeltaStore

__all__ = ["DeltaStore"]


def __getattr__(name: str):
    if name == "DeltaStore":
        from ttl.store.store import DeltaStore

        return DeltaStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
