"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A): one
Delta log store writes version 0 of a log on an S3 server; prints, as JSON, what came of
it (``written``, or the error's text)."""

from __future__ import annotations

import json
import sys

from tests.e2e.log_store_race import open_stores


def main(root: str, store_class: str, settings: dict[str, str]) -> None:
    spark, jvm, conf, (store,) = open_stores(store_class, settings, 1)
    path = jvm.org.apache.hadoop.fs.Path(f"{root}/t/_delta_log/{0:020d}.json")
    try:
        store.write(path, jvm.java.util.ArrayList([json.dumps({"v": 0})]).iterator(), False,
                    conf)
        outcome = "written"
    except Exception as exc:  # noqa: BLE001 - the refusal is what the test looks at
        outcome = str(exc)[:2000]
    print(json.dumps({"write": outcome}))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
