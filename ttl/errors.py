"""One exception family for the whole engine.

Fatal errors say what the operator should do ("Operator action: ..."); messages name the
exact setting, argument or file involved.
"""

from __future__ import annotations


class TtlError(Exception):
    """Base of every error the engine raises on purpose."""


class SetupError(TtlError):
    """The machine lacks something the engine needs (jars, Java, Maven).

    Operator action: run `make setup` (or `ttl setup`).
    """


class ConfigError(TtlError):
    """Bad configuration. Operator action: fix the named setting in the named file."""


class BrokerError(TtlError):
    """The local Kafka broker failed to start or answer. Operator action: read its server.log."""


class LayoutError(TtlError):
    """A table's layout or settings differ from the configuration (names both values).

    Operator action: run `ttl upgrade` for an older layout, `ttl alter` for another TTL.
    """


class TopicError(TtlError):
    """A changelog topic breaks a rule (BRIEF §5). Operator action: fix the named topic setting."""


class InvalidRecordError(TtlError):
    """A record fails validation (used by the point API; batches dead-letter instead)."""
