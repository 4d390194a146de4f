"""Every exception the engine raises on purpose, in one family.

A fatal error says what the operator should do ("Operator action: ..." in its docstring, and
the message names the exact setting, argument, file or topic involved). ``ttl``'s command
line prints a ``TtlError`` as one line and exits 2; anything else is a bug and keeps its
traceback.
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


class KafkaAccessDenied(TtlError):
    """The brokers refused the configured credentials. Operator action: fix the values of
    the environment variables named by ``kafka.sasl_username_env``/``sasl_password_env``."""


class LayoutError(TtlError):
    """A table's layout or settings differ from the configuration (names both values).

    Operator action: run `ttl upgrade` for an older layout, `ttl alter` for another TTL.
    """


class TopicError(TtlError):
    """A changelog topic breaks a rule (BRIEF §5). Operator action: fix the named topic setting."""


class StreamOwned(TtlError):
    """Another stream job holds the store's lease. Operator action: stop that job first (the
    message names its holder), or wait one ``eviction.lease`` after it died."""


class PublisherFenced(TtlError):
    """Another publisher of this store started; this one must stop (it is a zombie).

    Operator action: none if a newer job took over; otherwise find and stop the other
    process publishing this store's changelog.
    """


class RestoreError(TtlError):
    """The changelog cannot be restored as asked. Operator action: the message names the
    topic, partition, key or argument to fix (a wrong topic, a repartitioned changelog, an
    offset outside the topic)."""


class InvalidRecordError(TtlError):
    """A record fails validation (the point API; batches dead-letter instead). Not fatal:
    the caller fixes the record it passed."""


class CodecError(TtlError, ValueError):
    """Bytes that are not a valid encoding, or a number outside the type being encoded.

    A ``ValueError`` so callers can treat it as bad input; a ``TtlError`` so the engine's
    handlers recognise it as one of its own. Not fatal: the message names the field.
    """
