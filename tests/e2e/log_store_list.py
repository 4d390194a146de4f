"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A): one
Delta log store lists directories on an S3 server from a name on, as Delta does (a
snapshot update lists its log from a version, VACUUM a table's directory from ``\\0``);
prints, as JSON, the names of each listing."""

from __future__ import annotations

import json
import sys

from tests.e2e.log_store_race import open_stores


def main(store_class: str, settings: dict[str, str], listings: list[list[str]]) -> None:
    """``listings``: ``[directory, first name]`` pairs."""
    spark, jvm, conf, (store,) = open_stores(store_class, settings, 1)
    names = []
    for directory, first in listings:
        listed = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{directory}/{first}"), conf)
        names.append([])
        while listed.hasNext():
            names[-1].append(listed.next().getPath().getName())
    print(json.dumps({"listed": names}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3]))
