"""The bound ``stream.max_offsets_per_trigger = "auto"`` sets on a batch (``ttl.batch_size``)."""

from __future__ import annotations

import pytest

from ttl.batch_size import (
    ARROW_RECORD_BYTES,
    MAX_RECORDS,
    MIN_RECORDS,
    RECORD_OVERHEAD_BYTES,
    UNSAMPLED_RECORD_BYTES,
    Sample,
    bound,
    spark_bytes,
)
from ttl.config import StreamConfig

WEIGHT = 256 + RECORD_OVERHEAD_BYTES  # a sampled 256 B record, as the bound weighs it


def test_the_bound_is_the_byte_budget_over_the_sampled_record_size_and_its_overhead():
    chosen = bound(256 * 2**20, Sample(200, 200 * 256), max_result_bytes=None)
    assert chosen.records == 256 * 2**20 // WEIGHT
    assert "stream.batch_bytes 256 MiB" in chosen.why and "256 B a record" in chosen.why
    # tiny records: the overhead keeps their count near the budget's, not millions more
    assert bound(256 * 2**20, Sample(10, 10), max_result_bytes=None).records == \
        256 * 2**20 // (1 + RECORD_OVERHEAD_BYTES)


def test_a_batch_read_into_the_driver_keeps_to_half_of_its_result_limit():
    chosen = bound(2**30, Sample(10, 10 * 2**20), max_result_bytes=spark_bytes("256m"))
    assert chosen.records == 128 * 2**20 // (2**20 + ARROW_RECORD_BYTES)
    assert "spark.driver.maxResultSize" in chosen.why
    # 0 is Spark's "unlimited"; a larger limit leaves the budget alone
    assert bound(2**30, Sample(1, 768), max_result_bytes=0).records == 2**30 // 1024
    assert bound(2**30, Sample(1, 768), max_result_bytes=2**31).records == 2**30 // 1024


def test_the_result_limit_wins_over_the_least_records_a_batch_takes():
    """1,000 records of 1 MiB would be a batch of 1 GiB, over a 1g result limit: the job
    would fail at every start. The limit's half wins."""
    chosen = bound(256 * 2**20, Sample(100, 100 * 2**20), max_result_bytes=spark_bytes("1g"))
    assert chosen.records == 511  # 512 MiB over records of 1 MiB and their Arrow columns
    assert "spark.driver.maxResultSize" in chosen.why


def test_an_empty_input_assumes_a_record_size_and_the_bound_stays_in_range():
    assert bound(2**30, Sample(0, 0), max_result_bytes=None).records == \
        2**30 // (UNSAMPLED_RECORD_BYTES + RECORD_OVERHEAD_BYTES)
    few = bound(10, Sample(5, 5_000_000), max_result_bytes=None)
    assert few.records == MIN_RECORDS and f"at least {MIN_RECORDS:,}" in few.why
    assert bound(2**42, Sample(5, 5), max_result_bytes=None).records == MAX_RECORDS


@pytest.mark.parametrize(("text", "size"), [
    ("1g", 2**30), ("512m", 512 * 2**20), ("4096", 4096), ("2GB", 2 * 2**30), ("0", 0),
    (" 64k ", 64 * 2**10)])
def test_spark_sizes(text, size):
    assert spark_bytes(text) == size


@pytest.mark.parametrize("text", ["", "1.5g", "lots", "12 parsecs"])
def test_a_size_spark_would_not_read_is_refused(text):
    with pytest.raises(ValueError, match="not a Spark size"):
        spark_bytes(text)


def test_auto_is_the_default_and_a_number_still_bounds_the_batch():
    base = {"checkpoint": "/tmp/cp"}
    assert StreamConfig.model_validate(base).max_offsets_per_trigger == "auto"
    assert StreamConfig.model_validate(
        {**base, "max_offsets_per_trigger": 5000}).max_offsets_per_trigger == 5000
    with pytest.raises(ValueError):
        StreamConfig.model_validate({**base, "max_offsets_per_trigger": 0})


def test_the_driver_folds_at_most_half_of_its_result_limit_in_arrow_records():
    """On a cluster a batch under ``executor_min_records`` is folded in the driver; one of
    more records than this goes to the executors instead (``StreamJob._on_executors``)."""
    from ttl.batch_size import driver_records

    assert driver_records(Sample(10, 10 * 40_000), spark_bytes("1g")) == \
        2**29 // (40_000 + ARROW_RECORD_BYTES)  # 13,400 records of 40 kB: under 20,000
    assert driver_records(Sample(10, 10 * 40_000), 0) is None  # unlimited
    assert driver_records(Sample(10, 10 * 40_000), None) is None
