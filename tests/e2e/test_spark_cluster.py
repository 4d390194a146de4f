"""The jobs on a real Spark standalone cluster (a master and two one-core workers, separate
JVMs and Python workers), submitted through ``deploy/submit`` as an operator would."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.e2e.test_stream_job import DAY, crafted, produce, table_rows, write_conf
from tests.support import rebuild_from_changelog
from ttl.config import REPO_ROOT, load
from ttl.local.spark_cluster import LocalSparkCluster
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalSparkCluster(workers=2, cores=1, memory="2g",
                           work_dir=tmp_path_factory.mktemp("spark-cluster")) as running:
        yield running


def submit(conf_path, job: str, *args: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([str(REPO_ROOT / "deploy" / "submit"), "--conf", str(conf_path),
                           str(REPO_ROOT / "jobs" / job), "--", *args],
                          capture_output=True, text=True, timeout=900, cwd=cwd)


def test_stream_and_drill_jobs_run_on_a_standalone_cluster(spark, kafka, cluster, tmp_path):
    conf_path = write_conf(tmp_path, kafka, extra=f"""\
"spark.executor.memory" = "1g"
"spark.executor.cores" = "1"
"spark.driver.memory" = "1g"
[spark]
master = "{cluster.master_url}"
app_name = "ttl-cluster-test"
""")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    records = crafted(now) + [
        InputRecord(f"k{i % 50}".encode(), None if i % 7 == 0 else f"v{i}".encode(),
                    now - (i % 11) * 10, (("i", str(i).encode()),), i % 2, 100 + i)
        for i in range(400)]
    produce(kafka, conf_path, records)

    stream = submit(conf_path, "stream.py", "--available-now", cwd=tmp_path)
    assert stream.returncode == 0, stream.stderr[-4000:]
    assert f"records={len(records)} " in stream.stdout, stream.stdout
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(sorted(records, key=lambda r: (r.partition, r.offset)), now)
    rows = table_rows(spark, conf.store.path)
    assert rows == {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}

    drill = submit(conf_path, "drill.py", "--report", str(tmp_path / "drill.json"),
                   cwd=tmp_path)
    assert drill.returncode == 0, drill.stdout + drill.stderr[-4000:]
    assert "drill MATCH" in drill.stdout and f"{len(rows)} keys" in drill.stdout

    from tests.e2e.test_stream_job import _consume_everything
    rebuilt = rebuild_from_changelog(_consume_everything(kafka, conf.kafka.changelog_topic))
    assert {k: v for k, (v, _) in rebuilt.items()} == {k: v[0] for k, v in rows.items()}

    # Both jobs ran as cluster applications, with executors on both workers.
    apps = sorted(a["id"] for a in cluster.state()["completedapps"]
                  if a["name"] == "ttl-cluster-test")
    assert len(apps) == 2, cluster.state()["completedapps"]
    for i in range(2):
        executor_logs = list(cluster.worker_dir(i).glob(f"{apps[0]}/*/stderr"))
        assert executor_logs, f"no executor of the stream job ran on worker {i}"
