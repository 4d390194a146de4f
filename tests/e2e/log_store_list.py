"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A): one
Delta log store lists a log on an S3 server from a version on, as a snapshot update does;
prints, as JSON, the names it listed."""

from __future__ import annotations

import json
import sys

from tests.e2e.log_store_race import open_stores


def main(log: str, version: int, store_class: str, settings: dict[str, str]) -> None:
    spark, jvm, conf, (store,) = open_stores(store_class, settings, 1)
    listed = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{log}/{version:020d}"), conf)
    names = []
    while listed.hasNext():
        names.append(listed.next().getPath().getName())
    print(json.dumps({"listed": names}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), sys.argv[3], json.loads(sys.argv[4]))
