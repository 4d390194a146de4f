"""Run by ``test_object_store.py`` in a process of its own (its Spark session has S3A and
ttl's conditional log store): the scheduled clean-up of a store's log on the S3 server.

A store at ``ROOT/store`` gets batch commits that record input positions and a checkpoint;
its log's objects are then dated 3 hours back in the directory the server keeps them in
(``BACKING``: S3 has no way to set an object's time, and Delta's clean-up judges a file's
age by it); then the clean-up runs with a 2-hour retention, first with the changelog
behind (refused), then with everything published. Prints, as JSON, what came of it."""

from __future__ import annotations

import json
import sys
import time

from tests.integration.test_eviction import recs
from tests.support import age_log
from ttl import delta_log, eviction
from ttl.clock import FixedClock
from ttl.config import SparkConfig, StoreConfig
from ttl.errors import LogCleanupRefused
from ttl.jvm import jars
from ttl.spark import get_session
from ttl.store import DeltaStore

RETENTION_MS = 2 * 3_600_000


def main(root: str, backing: str, settings: dict[str, str]) -> None:
    spark = get_session(SparkConfig(master="local[2]",
                                    packages=[jars.Versions.load().hadoop_aws()],
                                    settings=settings))
    path = f"{root}/store"
    now = int(time.time() * 1000)
    store = DeltaStore(spark, StoreConfig(name="s3clean", path=path, ttl=10 * 86_400_000),
                       wall_clock=FixedClock(now))
    for i in range(3):
        store.apply_records(recs((b"k%d" % i, b"v", now + i)), metadata={
            "input_offsets": {"0": 10 + i, "1": 20 + i}, "whole_position": True,
            "query_id": "q", "batch_id": i})
    delta_log._jvm_log(spark, path).checkpoint()
    checkpointed = delta_log.latest_version(spark, path)
    age_log(f"{backing}/store", 3 * 3_600)
    out: dict[str, object] = {"checkpointed": checkpointed, "now": now}
    try:  # version 1 on the changelog, written 3 h ago: the clean-up could remove it
        eviction.clean_log(store, RETENTION_MS, 1)
        out["refused"] = None
    except LogCleanupRefused as exc:
        out["refused"] = str(exc)
    out["kept_after_refusal"] = delta_log.commit_info(spark, path, 0) is not None
    eviction.clean_log(store, RETENTION_MS, checkpointed)  # everything published
    out["gone"] = [v for v in range(checkpointed + 1)
                   if delta_log.commit_info(spark, path, v) is None]
    reopened = DeltaStore(spark, StoreConfig(name="s3clean", path=path, ttl=10 * 86_400_000),
                          wall_clock=FixedClock(now))
    position = delta_log.recorded_position(spark, path)
    out.update(position=position.position, last_batch=list(position.last_batch or ()),
               stream_time=reopened.stream_time.value,
               keys=sorted(k.decode() for k in reopened.entries(at=now)))
    print(json.dumps(out))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]))
