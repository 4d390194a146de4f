"""When maintenance first runs after a start (``schedule.first_run``)."""

import datetime as dt

from ttl.schedule import OVERDUE_DELAY_MS, first_run

HOUR = 3_600_000
NOW = 1_700_000_000_000


def at(ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.timezone.utc)


def test_an_interval_after_the_last_run_or_soon_after_the_start_when_that_is_past():
    assert first_run(str(NOW - HOUR // 2), HOUR, NOW) == at(NOW + HOUR // 2)
    assert first_run(str(NOW - 3 * HOUR), HOUR, NOW) == at(NOW + OVERDUE_DELAY_MS)
    assert first_run(str(NOW - HOUR), HOUR, NOW) == at(NOW + OVERDUE_DELAY_MS)
    assert first_run(str(NOW - 3 * HOUR), 60_000, NOW) == at(NOW + 60_000)  # never later
    assert first_run(str(NOW + 5 * HOUR), HOUR, NOW) == at(NOW + HOUR)  # a clock ahead


def test_no_record_or_an_unreadable_one_leaves_the_first_run_to_the_trigger():
    assert first_run(None, HOUR, NOW) is None
    assert first_run("soon", HOUR, NOW) is None
    assert first_run("-5", HOUR, NOW) is None
