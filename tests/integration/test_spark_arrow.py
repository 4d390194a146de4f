"""``ttl.arrow.arrow_batches``: a frame's rows as Arrow batches, in order, a partition at a
time (the publisher's change-feed and re-seed reads go through it)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from ttl.arrow import arrow_batches

pytestmark = pytest.mark.integration


def _frame(spark, n: int, partitions: int):
    return (spark.range(0, n, 1, partitions)
            .selectExpr("id * 7 % 1001 AS v", "id",
                        "CAST(CAST(id AS STRING) AS BINARY) AS key",
                        "IF(id % 3 = 0, NULL, CAST(id AS INT)) AS record_ttl",
                        "IF(id % 2 = 0, array(named_struct('key', 'h', 'value', "
                        "CAST(NULL AS BINARY))), array()) AS headers"))


def test_rows_come_in_the_frames_order_with_their_types(spark):
    frame = _frame(spark, 30_000, 6).orderBy("v", "id")  # a sort across partitions
    batches = list(arrow_batches(frame))
    got = pa.Table.from_batches(batches).to_pylist()
    expected = [r.asDict(recursive=True) for r in frame.collect()]
    assert len(got) == 30_000
    assert got == expected  # order, bytes, nulls, nested lists of structs
    assert isinstance(got[1]["key"], bytes) and got[0]["record_ttl"] is None
    assert len(batches) > 1  # streamed, not one collect


def test_an_empty_frame_gives_no_batches(spark):
    assert list(arrow_batches(_frame(spark, 10, 2).where("id < 0"))) == []


def test_a_failing_query_raises_and_the_session_goes_on(spark):
    broken = _frame(spark, 100, 2).selectExpr("assert_true(id < 50) AS ok")
    with pytest.raises(Exception, match="id < 50"):
        list(arrow_batches(broken))
    half_read = arrow_batches(_frame(spark, 50_000, 4).orderBy("id"))
    assert next(half_read).num_rows > 0  # abandoned after one batch
    del half_read
    assert sum(b.num_rows for b in arrow_batches(_frame(spark, 1000, 2))) == 1000
