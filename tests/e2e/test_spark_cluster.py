"""The jobs on a real Spark standalone cluster (a master and two one-core workers, separate
JVMs and Python workers), submitted through ``deploy/submit`` as an operator would: the
stream folds its batches on the executors, whose Python has no ``ttl`` of its own (only
the package the submit ships)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.e2e.test_stream_job import DAY, crafted, produce, table_rows, ttl, write_conf
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


def python_without_ttl(where: Path) -> Path:
    """This virtual environment's Python with ``ttl`` hidden (its editable install's
    finder, and any path entry of a checkout, removed at start-up): an executor's Python,
    which has Spark's dependencies but not the package (a shipped zip still imports)."""
    hide = where / "hide-ttl"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(  # and any directory holding a ttl package
        "import os, sys\n"
        "sys.meta_path[:] = [f for f in sys.meta_path if 'editable' not in repr(f)]\n"
        "sys.path[:] = [p for p in sys.path if p.endswith('.zip') or not os.path.isfile("
        "os.path.join(p or '.', 'ttl', '__init__.py'))]\n")
    wrapper = where / "python-without-ttl"
    wrapper.write_text(f'#!/bin/sh\nPYTHONPATH="{hide}${{PYTHONPATH:+:$PYTHONPATH}}" '
                       f'exec {sys.executable} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper


def test_stream_and_drill_jobs_run_on_a_standalone_cluster(spark, kafka, cluster, tmp_path):
    executor_python = python_without_ttl(tmp_path)
    alone = subprocess.run([str(executor_python), "-c", "import pyarrow, pandas; import ttl"],
                           capture_output=True, text=True, cwd=tmp_path)
    assert "No module named 'ttl'" in alone.stderr, alone.stderr
    conf_path = write_conf(tmp_path, kafka, max_offsets=150,
                           stream_extra='batch_path = "executors"', extra=f"""\
"spark.executor.memory" = "1g"
"spark.executor.cores" = "1"
"spark.driver.memory" = "1g"
"spark.pyspark.python" = "{executor_python}"
"spark.pyspark.driver.python" = "{sys.executable}"
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
    lines = [json.loads(line[line.index("{"):]) for line in
             (stream.stdout + stream.stderr).splitlines() if '"folded_on"' in line]
    assert len(lines) >= 3 and {b["folded_on"] for b in lines} == {"executors"}, lines
    # the updates' replace by position, of the stored rows the executors' fold found
    assert {b["write"] for b in lines} >= {"append", "positional"}, lines
    # publish_from "auto": a batch folded on the executors is published from there too
    # (each changelog partition by its own producer), in the executors' Python.
    assert sum(b["published_from"] in ("executors", "both") for b in lines) >= 2, lines
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(sorted(records, key=lambda r: (r.partition, r.offset)), now)
    rows = table_rows(spark, conf.store.path)
    assert rows == {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}

    # ``ttl run`` on the cluster master, no spark-submit: the session ships the package.
    more = [InputRecord(f"k{i % 70}".encode(), None if i % 9 == 0 else f"w{i}".encode(),
                        now + i, (), i % 2, 1_000 + i) for i in range(200)]
    produce(kafka, conf_path, more)
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}
    run = ttl("run", "--conf", str(conf_path), "--available-now", cwd=tmp_path, env=env,
              timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    lines = [json.loads(line[line.index("{"):]) for line in
             (run.stdout + run.stderr).splitlines() if '"folded_on"' in line]
    assert lines and {b["folded_on"] for b in lines} == {"executors"}, lines
    model.apply_batch(sorted(more, key=lambda r: (r.partition, r.offset)), now)
    rows = table_rows(spark, conf.store.path)
    assert rows == {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}

    drill = submit(conf_path, "drill.py", "--report", str(tmp_path / "drill.json"),
                   cwd=tmp_path)
    assert drill.returncode == 0, drill.stdout + drill.stderr[-4000:]
    assert "drill MATCH" in drill.stdout and f"{len(rows)} keys" in drill.stdout

    from tests.e2e.test_stream_job import _consume_everything
    rebuilt = rebuild_from_changelog(_consume_everything(kafka, conf.kafka.changelog_topic))
    assert {k: v for k, (v, _) in rebuilt.items()} == {k: v[0] for k, v in rows.items()}

    # The three runs were cluster applications, with executors on both workers.
    apps = sorted(a["id"] for a in cluster.state()["completedapps"]
                  if a["name"] == "ttl-cluster-test")
    assert len(apps) == 3, cluster.state()["completedapps"]
    for i in range(2):
        executor_logs = list(cluster.worker_dir(i).glob(f"{apps[0]}/*/stderr"))
        assert executor_logs, f"no executor of the stream job ran on worker {i}"
