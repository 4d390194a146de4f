"""Spark + Delta: a table with the change feed and deletion vectors, MERGE, change feed back."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.integration


def test_merge_into_delta_table_and_read_change_feed(spark, table_path):
    spark.sql(
        f"CREATE TABLE delta.`{table_path}` (key BINARY NOT NULL, value BINARY) USING delta "
        "TBLPROPERTIES ('delta.enableChangeDataFeed'='true', 'delta.enableDeletionVectors'='true')"
    )
    props = spark.sql(f"DESCRIBE DETAIL delta.`{table_path}`").first()["properties"]
    assert props["delta.enableChangeDataFeed"] == "true"
    assert props["delta.enableDeletionVectors"] == "true"

    spark.createDataFrame([(b"a", b"1"), (b"b", b"2")], "key binary, value binary") \
        .createOrReplaceTempView("src1")
    spark.sql(f"MERGE INTO delta.`{table_path}` t USING src1 s ON t.key = s.key "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")
    spark.createDataFrame([(b"a", b"9"), (b"b", None)], "key binary, value binary") \
        .createOrReplaceTempView("src2")
    spark.sql(f"MERGE INTO delta.`{table_path}` t USING src2 s ON t.key = s.key "
              "WHEN MATCHED AND s.value IS NULL THEN DELETE "
              "WHEN MATCHED THEN UPDATE SET * WHEN NOT MATCHED THEN INSERT *")

    table = spark.read.format("delta").load(table_path)
    rows = {bytes(r.key): bytes(r.value) for r in table.collect()}
    assert rows == {b"a": b"9"}
    changes = (spark.read.format("delta").option("readChangeFeed", "true")
               .option("startingVersion", 1).load(table_path)
               .select("key", "_change_type", "_commit_version").collect())
    seen = sorted((bytes(r.key), r._change_type, r._commit_version) for r in changes)
    assert seen == [
        (b"a", "insert", 1), (b"a", "update_postimage", 2), (b"a", "update_preimage", 2),
        (b"b", "delete", 2), (b"b", "insert", 1),
    ]
