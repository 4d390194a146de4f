"""jobs/stream.py through spark-submit (deploy/submit), as a cluster user would run it."""

from __future__ import annotations

import subprocess
import time
import zipfile

import pytest

from tests.e2e.test_stream_job import crafted, produce, table_rows, write_conf
from ttl.config import REPO_ROOT, load

pytestmark = pytest.mark.e2e


def test_stream_job_runs_through_spark_submit(spark, kafka, tmp_path):
    conf_path = write_conf(tmp_path, kafka)
    produce(kafka, conf_path, crafted(int(time.time() * 1000)))
    stale = REPO_ROOT / "build" / "lib" / "ttl" / "moved_away.py"  # a module deleted since
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("raise ImportError('a module that no longer exists')\n")
    proc = subprocess.run(
        [str(REPO_ROOT / "deploy" / "submit"), "--conf", str(conf_path),
         str(REPO_ROOT / "jobs" / "stream.py"), "--", "--available-now"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "records=11" in proc.stdout
    assert set(table_rows(spark, load(conf_path).store.path)) == {b"a", b"b", b"c"}
    # What the command ships (--py-files): the package the driver runs, never a build
    # directory's leftovers.
    printed = subprocess.run(
        [str(REPO_ROOT / "deploy" / "submit"), "--print", "--conf", str(conf_path),
         str(REPO_ROOT / "jobs" / "stream.py")], capture_output=True, text=True, check=True,
        timeout=120).stdout.split()
    shipped = zipfile.ZipFile(printed[printed.index("--py-files") + 1]).namelist()
    stale.unlink()
    assert "ttl/commands.py" in shipped and "ttl/moved_away.py" not in shipped


def test_print_shows_the_full_command_without_running_it(tmp_path):
    out = subprocess.run([str(REPO_ROOT / "deploy" / "submit"), "--print", "--packages",
                          "--conf", str(REPO_ROOT / "conf" / "local.toml"), "jobs/evict.py",
                          "--", "--dry-run"], capture_output=True, text=True, check=True,
                         timeout=60).stdout
    assert "--packages io.delta:delta-spark_4.1_2.13:4.4.0," in out
    assert "--properties-file" in out and "--files" in out and "--py-files" in out
    conf = REPO_ROOT / "conf" / "local.toml"
    assert out.rstrip().endswith(f"jobs/evict.py --conf {conf} --dry-run")
