"""Every exception the engine raises on purpose, in one family.

A fatal error says what the operator should do: each class carries an ``action``, and
``ttl``'s command line prints ``operator_message()`` (the message, naming the exact setting,
argument, file or topic, then the action) as one line and exits 2. Anything that is not a
``TtlError`` is a bug and keeps its traceback.
"""

from __future__ import annotations


class TtlError(Exception):
    """Base of every error the engine raises on purpose."""

    action: str | None = None

    def operator_message(self) -> str:
        """The message, then the operator action unless the message already says it."""
        text = str(self)
        if self.action and "Operator action" not in text:
            text = f"{text.rstrip('.')}. Operator action: {self.action}"
        return text


class SetupError(TtlError):
    """The machine lacks something the engine needs (jars, Java, Maven)."""

    action = "run `make setup` (or `ttl setup`)."


class ConfigError(TtlError):
    """Bad configuration or a bad command-line argument."""

    action = "fix the named setting in the named file (or the named argument)."


class BrokerError(TtlError):
    """The local Kafka broker failed to start or answer."""

    action = "read the broker's server.log in its data directory."


class InputLost(TtlError):
    """Input the store had not read yet is gone from the input topic (its retention passed
    while the job was down)."""

    action = ('to go on without it, set stream.on_lost_input = "skip" and run `ttl run '
              '--available-now` once (the skipped ranges are recorded in the table\'s commit '
              "history), then set it back; to keep it, put those records back into the input "
              "topic from a backup first.")


class CheckpointRegressed(TtlError):
    """The stream's checkpoint is behind the input the table has already applied (a
    checkpoint restored from a backup, or left over from before a restore): its batches
    would re-apply old input, or be skipped as already applied while holding new input."""

    action = ("move the checkpoint directory away (stream.checkpoint) and start again: a new "
              "checkpoint resumes every input partition right after the position the table "
              "records.")


class CheckpointAhead(TtlError):
    """The stream's checkpoint resumes the input past the position the table holds (a
    checkpoint from before a restore): starting from it would skip the records between."""

    action = ("move the checkpoint directory away (stream.checkpoint) and start again: a new "
              "checkpoint resumes every input partition right after the position the table "
              "records (from the earliest offsets the topic holds when the table records "
              "none, re-applying them in order).")


class StaleLookup(TtlError):
    """Other commits kept landing between a batch's lookup of its keys and its write, so
    the batch could not be folded against the version it would write on."""

    action = ("find the process committing to the store table beside the engine (an "
              "operator's job in a loop?) and stop it; the batch runs again on restart.")


class PositionalUnsupported(TtlError):
    """A batch cannot be written by position (``ttl.store.positional``): a file it touches
    has no row count in its statistics, or Delta's snapshot and delta-rs's disagree on the
    files. Raised before anything is written; the batch takes Delta's write instead."""

    action = "none: the batch is written by Delta's own write instead."


class ChangeFeedGone(TtlError):
    """Versions the publisher has not published have no change data any more (a VACUUM, or
    the log's retention, removed it): they cannot be published one by one."""

    action = ("run `ttl publish --reseed --conf PROFILE` while no stream runs: it publishes "
              "the table's current state as a snapshot (a put per entry, a tombstone per key "
              "the changelog holds that the table no longer has) and publication continues "
              "after it. To avoid this, keep maintenance.vacuum_retention and the table's "
              "delta.logRetentionDuration above the publisher's lag (the scheduled clean-up "
              "of the log, maintenance.log_retention, waits for the publisher itself).")


class VacuumRefused(TtlError):
    """A VACUUM would remove change data the publisher has not read yet (or its position is
    unknown); it was skipped, nothing changed."""

    action = ("find why publication lags (`ttl status`: changelog lag) and let it catch up; "
              "the next scheduled VACUUM runs once the lag is below the retention.")


class LogCleanupRefused(TtlError):
    """A clean-up of the store's log would remove commits the publisher has not published
    yet (or its position is unknown); it was skipped, nothing changed."""

    action = ("find why publication lags (`ttl status`: changelog lag) and let it catch up; "
              "the log is cleaned up at the next run after it has.")


class ReseedRequired(TtlError):
    """The table was restored from a point in time or another topic: its changes cannot
    continue the store's changelog one by one (the changelog still holds what the restore
    rolled back)."""

    action = ("run `ttl publish --reseed --conf PROFILE` once while no stream runs: it "
              "publishes the table's state (with tombstones for keys the changelog has and "
              "the table lacks); then start the stream.")


class ProgressUnreadable(TtlError):
    """The changelog's progress topic could not be read to its end in time. Guessing would
    restart publication from version 0 (or lose the input position), so nothing goes on."""

    action = ("check that the brokers answer and the -progress topic's partition has a "
              "leader, then start again.")


class ChangelogMismatch(TtlError):
    """The table at the store's path does not continue what its changelog's progress says
    was published (recreated at the path, replaced, or its versions went back): publishing
    it would leave the changelog silently behind, or publish under versions it has."""

    action = ("move whatever is at the store's path away and rebuild the store from its "
              "changelog with `ttl restore --conf PROFILE`.")


class StoreMissing(TtlError):
    """The store's table does not exist. Only ``ttl run`` on a store whose changelog has no
    progress yet (a new store) and ``ttl restore`` create it: any other command creating an
    empty table there would stand for a store that was lost."""

    action = ("for a new store, start it with `ttl run --conf PROFILE`; for a store whose "
              "table was lost, rebuild it with `ttl restore --conf PROFILE`; else fix "
              "store.path.")


class KafkaAccessDenied(TtlError):
    """The brokers refused the configured credentials."""

    action = ("fix the values of the environment variables named by "
              "kafka.sasl_username_env and kafka.sasl_password_env.")


class KafkaUnreachable(TtlError):
    """No broker of the configured bootstrap servers answered."""

    action = ("start the brokers, or fix kafka.bootstrap_servers (host, port, listener) and "
              "the network between here and them.")


class LayoutError(TtlError):
    """A table's layout or settings differ from the configuration (names both values)."""

    action = ("run `ttl upgrade` for an older layout or `ttl alter --ttl` for another TTL, "
              "or fix the profile.")


class ScanBlocked(TtlError):
    """delta-rs cannot read the table in one scan (too many files with deletion vectors:
    it would hang); the message says what to run instead."""

    action = ("wait for the scheduled OPTIMIZE (or run `ttl upgrade`, which runs one now), "
              "or read the table with Spark.")


class TopicError(TtlError):
    """A changelog topic breaks a rule (docs/semantics.md, Changelog)."""

    action = "fix the named topic setting (or recreate the topic with `ttl topic create`)."


class StreamOwned(TtlError):
    """Another stream job holds the store's lease."""

    action = "stop the job named as the holder, or wait one eviction.lease after it died."


class LeaseLost(TtlError):
    """A standalone operation lost the store's lease while it ran (another writer took it,
    or renewals failed until it lapsed); it stopped before writing more."""

    action = ("check what holds the lease now (`ttl status`); run the operation again once "
              "the store is free. Whatever it committed before the loss is in the table's "
              "history.")


class ReplayIncomplete(TtlError):
    """Some dead letters could not be produced back to the input topic."""

    action = ("run the replay again once the brokers accept writes: the records already "
              "delivered are recorded and skipped.")


class PublisherFenced(TtlError):
    """Another publisher of this store started; this one must stop (it is a zombie)."""

    action = ("none if a newer job took over this store; otherwise find and stop the other "
              "process publishing its changelog, and if there is none, the producer's own "
              "fatal error is in the log above.")


class RestoreError(TtlError):
    """The changelog cannot be restored as asked; nothing was changed."""

    action = ("fix what the message names (the topic, a repartitioned changelog, an "
              "argument) and run the restore again.")


class InvalidRecordError(TtlError):
    """A record fails validation (the point API; batches dead-letter instead). Not fatal:
    the caller fixes the record it passed."""


class CodecError(TtlError, ValueError):
    """Bytes that are not a valid encoding, or a number outside the type being encoded.

    A ``ValueError`` so callers can treat it as bad input; a ``TtlError`` so the engine's
    handlers recognise it as one of its own. Not fatal: the message names the field.
    """
