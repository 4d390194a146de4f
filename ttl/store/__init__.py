"""The timestamped store on Delta Lake (docs/semantics.md: data model, writes, expiry)."""

from ttl.store.store import DeltaStore

__all__ = ["DeltaStore"]
