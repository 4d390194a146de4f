"""Benchmark: a Delta log's listing on S3 against its length (prints figures).

    .venv/bin/python -m tests.bench.s3_listing                        # 1k, 10k, 30k files
    .venv/bin/python -m tests.bench.s3_listing --commits 1000,100000 --rounds 3

Delta lists ``_delta_log`` from a version on at every snapshot update, several times per
batch. On S3 its store (``S3SingleDriverLogStore``) lists the whole directory;
``ttl.delta.S3ConditionalLogStore`` lists it from a key unless ``delta.enableFastS3AListFrom``
is false. Per log length this starts the local S3-compatible server
(``ttl.local.object_store``), writes that many commit files straight into its directory (no
request each), and times a listing from the newest version by ttl's store with that
setting false (the whole directory, as Delta's) and true (from a key), alternated
``--rounds`` times in one process, and prints the medians and their ratio. The local
server walks its directory for every request, so its listing from a key still grows with
the log; S3's does not.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from ttl.config import SparkConfig
from ttl.jvm.jars import Versions
from ttl.local.object_store import LocalObjectStore
from ttl.single_writer import S3_CONDITIONAL
from ttl.spark import get_session

BUCKET = "listing"


def _listing_s(spark, conf, path: str, version: int, fast: bool) -> tuple[float, int]:
    """Seconds for one listing from ``version`` by a new instance of ttl's S3 store, with
    Delta's fast listing ``fast``; and how many names it gave."""
    jvm = spark.sparkContext._jvm
    settings = jvm.org.apache.hadoop.conf.Configuration(conf)
    settings.set("delta.enableFastS3AListFrom", str(fast).lower())
    store = jvm.ttl.delta.S3ConditionalLogStore(settings)
    started = time.monotonic()
    listed = store.listFrom(jvm.org.apache.hadoop.fs.Path(f"{path}/{version:020d}"), settings)
    count = 0
    while listed.hasNext():
        listed.next()
        count += 1
    return time.monotonic() - started, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", default="1000,10000,30000",
                        help="Comma-separated log lengths (commit files).")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with LocalObjectStore() as s3:
        root = s3.create_bucket(BUCKET)
        os.environ.update(s3.environment())
        spark = get_session(SparkConfig(
            master="local[1]", packages=[Versions.load().hadoop_aws()],
            settings={**s3.spark_settings(), "spark.delta.logStore.s3a.impl": S3_CONDITIONAL}))
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        print(f"{'commit files':>12} {'whole directory':>16} {'from a key':>11} {'ratio':>6}")
        for commits in (int(c) for c in args.commits.split(",")):
            log_dir = s3.buckets / BUCKET / f"log{commits}" / "_delta_log"
            log_dir.mkdir(parents=True)
            for version in range(commits):
                (log_dir / f"{version:020d}.json").write_text("{}\n")
            path = f"{root}/log{commits}/_delta_log"
            times: dict[bool, list[float]] = {False: [], True: []}
            for _ in range(args.rounds):
                for fast in (False, True):
                    seconds, count = _listing_s(spark, conf, path, commits - 1, fast)
                    assert count == 1, count
                    times[fast].append(seconds)
            whole, keyed = (statistics.median(times[f]) for f in (False, True))
            print(f"{commits:>12,} {whole:>14.3f} s {keyed:>9.3f} s {whole / keyed:>6.1f}",
                  flush=True)
        spark.stop()


if __name__ == "__main__":
    main()
