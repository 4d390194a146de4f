"""The timestamped store on Delta Lake (BRIEF §2-§4)."""

from ttl.store.store import DeltaStore

__all__ = ["DeltaStore"]
