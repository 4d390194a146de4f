"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A): one
Delta log store lists directories on an S3 server from a name on, as Delta does (a
snapshot update lists its log from a version, VACUUM a table's directory from ``\\0``);
then, with a table location, VACUUMs a table that has a sibling (``<table>_lease``) through
the session's log store; prints, as JSON, the names of each listing and what the VACUUM
left."""

from __future__ import annotations

import json
import sys

from tests.e2e.log_store_race import open_stores


def main(store_class: str, settings: dict[str, str], listings: list[list[str]],
         table: str) -> None:
    """``listings``: ``[directory, first name]`` pairs."""
    spark, jvm, conf, (store,) = open_stores(store_class, settings, 1)
    names = []
    for directory, first in listings:
        listed = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{directory}/{first}"), conf)
        names.append([])
        while listed.hasNext():
            names[-1].append(listed.next().getPath().getName())
    for location in (table, f"{table}_lease"):
        for version in range(2):
            spark.range(version * 10, version * 10 + 10).write.format("delta") \
                .mode("overwrite").save(location)
    spark.sql(f"VACUUM delta.`{table}` RETAIN 0 HOURS").collect()
    kept = {location: sorted(r.id for r in spark.read.format("delta").load(location).collect())
            for location in (table, f"{table}_lease")}
    print(json.dumps({"listed": names, "after_vacuum": kept}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]), sys.argv[4])
