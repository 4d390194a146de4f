"""Which producer errors end a publisher as fenced (``publisher.fatal_error``): pure logic on
the client's own error objects."""

from __future__ import annotations

from confluent_kafka import KafkaError, KafkaException

from ttl.changelog.publisher import fatal_error


def test_a_fenced_instance_is_fatal_wherever_the_error_surfaces():
    # add-partitions or commit: the error carries the fatal flag
    assert fatal_error(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)))
    assert fatal_error(KafkaException(KafkaError(KafkaError.PRODUCER_FENCED, fatal=True)))
    # produce() after the background thread hit it first: "Local: Fatal error", unflagged
    produced = KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")
    assert not produced.fatal()
    assert fatal_error(KafkaException(produced))


def test_errors_a_publisher_recovers_from_are_not_fatal():
    for code in (KafkaError._TIMED_OUT, KafkaError._TRANSPORT, KafkaError._MSG_TIMED_OUT,
                 KafkaError.NOT_LEADER_FOR_PARTITION):
        assert not fatal_error(KafkaException(KafkaError(code))), code
    assert not fatal_error(KafkaException("no error object"))
    assert not fatal_error(KafkaException())
