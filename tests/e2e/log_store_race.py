"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A): two
instances of a Delta log store, as two drivers would hold, race to write each of ``ROUNDS``
table versions on the local object store; prints, as JSON, how many writers won each round
and what a second, later write of a version met."""

from __future__ import annotations

import json
import sys
import threading

from ttl.config import SparkConfig
from ttl.jvm import jars
from ttl.spark import get_session

ROUNDS = 12


def open_stores(store_class: str, settings: dict[str, str], count: int):
    """A Spark session with S3A and ``settings``, and ``count`` instances of the log store
    ``store_class`` (a ``ttl.delta`` class), as that many drivers would hold: ``(spark,
    jvm, hadoop configuration, stores)``."""
    spark = get_session(SparkConfig(master="local[2]", packages=[jars.Versions.load().hadoop_aws()],
                                    settings=settings))
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    store = getattr(jvm.ttl.delta, store_class.rsplit(".", 1)[1])
    return spark, jvm, conf, [store(conf) for _ in range(count)]


def main(root: str, store_class: str, settings: dict[str, str]) -> None:
    spark, jvm, conf, (a, b) = open_stores(store_class, settings, 2)

    def lines(tag: str):
        return jvm.java.util.ArrayList([json.dumps({"writer": tag})]).iterator()

    winners = []
    for version in range(ROUNDS):
        path = jvm.org.apache.hadoop.fs.Path(f"{root}/race/_delta_log/{version:020d}.json")
        won: list[str] = []

        def write(instance, tag: str, path=path, won=won) -> None:
            try:
                instance.write(path, lines(tag), False, conf)
                won.append(tag)
            except Exception as exc:  # noqa: BLE001 - the loser's refusal is expected
                if "FileAlreadyExistsException" not in str(exc):
                    won.append(f"error: {str(exc)[:300]}")

        threads = [threading.Thread(target=write, args=(s, t)) for s, t in ((a, "a"), (b, "b"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        winners.append(won)
    again = "written"
    try:
        b.write(jvm.org.apache.hadoop.fs.Path(f"{root}/race/_delta_log/{0:020d}.json"),
                lines("late"), False, conf)
    except Exception as exc:  # noqa: BLE001
        again = "FileAlreadyExistsException" if "FileAlreadyExistsException" in str(exc) \
            else str(exc)[:300]
    print(json.dumps({"winners": winners, "second_write": again}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
