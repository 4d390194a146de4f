"""How stored bytes and times are shown: to people (text) and to machines (JSON).

One home for it, so ``get``, ``scan`` and ``dead-letters`` print alike: bytes as UTF-8 text
when they are UTF-8 (a key, a value, a header value), else hex for people and base64 for
machines; epoch milliseconds with their UTC time beside them.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone


def shown(raw: bytes | None) -> str:
    """Bytes for people: their UTF-8 text, else ``0x`` and their hex; ``None`` as none."""
    if raw is None:
        return "none"
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return "0x" + raw.hex()


def for_json(raw: bytes | None) -> str | dict | None:
    """Bytes for machines: their UTF-8 text, else ``{"base64": ...}``; ``None`` as null."""
    if raw is None:
        return None
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode()}


def utc(ms: int | None) -> str:
    """Epoch milliseconds as UTC ISO 8601 (``2026-11-26T09:00:00.000Z``)."""
    if ms is None:
        return "none"
    try:
        return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).isoformat(
            timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):  # beyond what a datetime holds
        return "out of calendar range"
