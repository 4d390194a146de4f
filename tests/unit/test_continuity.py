"""The rule of which table may continue the changelog's progress (pure)."""

from __future__ import annotations

from ttl.changelog.continuity import PublishedSoFar, TableAtPath, refusal, reseed_offset


def table(table_id="t1", newest=10, continues_after=None, reseed_required=False):
    return TableAtPath("/s", table_id, newest, continues_after, reseed_required)


def published(version=10, table_id="t1"):
    return PublishedSoFar("cl", version, table_id)


def test_nothing_published_yet_any_table_starts_the_changelog():
    assert refusal(table("new", newest=0), published(-1, None)) is None


def test_the_same_table_continues_unless_its_versions_went_back():
    assert refusal(table(newest=10), published(10)) is None
    assert refusal(table(newest=12), published(10)) is None
    why = refusal(table(newest=3), published(10))
    assert why is not None and "ends at version 3" in why and "ttl restore" in why


def test_a_progress_without_a_table_id_is_the_same_table_but_still_not_ahead():
    assert refusal(table(newest=10), published(10, None)) is None
    assert refusal(table(newest=2), published(10, None)) is not None


def test_a_table_created_again_at_the_path_is_refused_naming_the_restore():
    why = refusal(table("recreated", newest=0), published(10, "t1"))
    assert why is not None and "not the table" in why and "ttl restore" in why
    # even when its versions happen to be ahead of the progress
    assert refusal(table("recreated", newest=50), published(10, "t1")) is not None


def test_a_restored_table_continues_up_to_its_mark_only():
    assert refusal(table("r", newest=13, continues_after=10), published(10, "t1")) is None
    why = refusal(table("r", newest=13, continues_after=10), published(12, "t1"))
    assert why is not None and "published up to version 12" in why


def test_a_partial_restore_is_left_to_the_reseed():
    assert refusal(table("r", newest=13, reseed_required=True), published(40, "t1")) is None


def test_a_reseed_publishes_after_everything_on_the_changelog():
    assert reseed_offset(5, 0, 3) == 0
    assert reseed_offset(5, 0, 5) == 1        # 5 + 1 = 6 > 5
    assert reseed_offset(2, 4, 20) == 19      # 2 + 19 = 21 > 20


def test_an_unfinished_restores_table_is_published_by_no_one():
    pending = TableAtPath("/s", "r", 1, None, False, 0, restore_pending=True)
    why = refusal(pending, published(-1, None))
    assert why is not None and "did not finish" in why and "ttl restore" in why
