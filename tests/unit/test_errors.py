"""Every fatal error tells the operator what to do, in the one line the CLI prints."""

from __future__ import annotations

import inspect

import pytest

from ttl import errors

NOT_FATAL = {errors.TtlError, errors.InvalidRecordError, errors.CodecError}
FATAL = [cls for _, cls in inspect.getmembers(errors, inspect.isclass)
         if issubclass(cls, errors.TtlError) and cls not in NOT_FATAL]


def test_every_engine_exception_lives_in_errors():
    import pkgutil

    import ttl

    for info in pkgutil.walk_packages(ttl.__path__, "ttl."):
        module = __import__(info.name, fromlist=["_"])
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, BaseException) and cls.__module__.startswith("ttl."):
                assert cls.__module__ == "ttl.errors", f"{cls.__name__} in {cls.__module__}"


@pytest.mark.parametrize("cls", FATAL, ids=lambda c: c.__name__)
def test_fatal_errors_name_an_operator_action(cls):
    assert cls.action, f"{cls.__name__} has no operator action"
    line = cls("store s: something broke.").operator_message()
    assert line == f"store s: something broke. Operator action: {cls.action}"
    assert "\n" not in line


def test_a_message_that_already_says_the_action_is_kept_as_it_is():
    text = "topic t: cleanup.policy is 'delete'. Operator action: fix the topic"
    assert errors.TopicError(text).operator_message() == text
    assert errors.InvalidRecordError("rejected").operator_message() == "rejected"
