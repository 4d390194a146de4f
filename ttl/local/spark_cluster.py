"""A real Spark standalone cluster on 127.0.0.1: one master and N workers, separate JVMs.

Started from the installed PySpark's ``spark-class`` (the wheel has no ``start-master.sh``).
Jobs submitted to it run in executor JVMs with their own Python workers, so code that only
works in local mode (state kept on the driver, closures over unpicklable objects, modules the
executors cannot import) fails here as it would on a real cluster. For tests and trying a
cluster profile on one machine; like the local broker, it never outlives its Python process.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from ttl.errors import SetupError
from ttl.local.process import die_with_parent, free_port

log = logging.getLogger(__name__)

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"


class LocalSparkCluster:
    """``with LocalSparkCluster(workers=2) as cluster: ... cluster.master_url ...``"""

    def __init__(self, workers: int = 2, *, cores: int = 1, memory: str = "2g",
                 work_dir: str | Path | None = None, port: int | None = None) -> None:
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.dir = Path(work_dir or tempfile.mkdtemp(prefix="ttl-spark-"))
        self.port = port or free_port()
        self.ui_port = free_port()
        self.processes: list[subprocess.Popen] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def worker_dir(self, index: int) -> Path:
        """Where worker ``index`` keeps its applications' executor logs and files."""
        return self.dir / f"worker-{index}"

    def start(self, timeout: float = 90.0) -> LocalSparkCluster:
        started = time.monotonic()
        self._spawn("master", [MASTER, "--host", "127.0.0.1", "--port", str(self.port),
                               "--webui-port", str(self.ui_port)])
        for i in range(self.workers):
            self.worker_dir(i).mkdir(parents=True, exist_ok=True)
            self._spawn(f"worker-{i}", [
                WORKER, "--host", "127.0.0.1", "--cores", str(self.cores), "--memory",
                self.memory, "--webui-port", str(free_port()), "--work-dir",
                str(self.worker_dir(i)), self.master_url])
        self._wait_for_workers(started + timeout)
        log.info("spark standalone cluster up at %s with %d workers in %.1f s",
                 self.master_url, self.workers, time.monotonic() - started)
        return self

    def state(self) -> dict:
        """The master's JSON status (workers, running and completed applications)."""
        url = f"http://127.0.0.1:{self.ui_port}/json/"
        with urllib.request.urlopen(url, timeout=5) as response:
            return json.load(response)

    def stop(self) -> None:
        for proc in reversed(self.processes):
            if proc.poll() is None:
                proc.terminate()
        for proc in self.processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.processes.clear()

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _spawn(self, name: str, args: list[str]) -> None:
        spark_class = Path(sys.executable).parent / "spark-class"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_NO_DAEMONIZE": "1",
               "PYSPARK_PYTHON": sys.executable}
        with open(self.dir / f"{name}.log", "ab") as out:  # the child keeps its own copy
            self.processes.append(subprocess.Popen(
                [str(spark_class), *args], stdout=out, stderr=subprocess.STDOUT, env=env,
                preexec_fn=die_with_parent))

    def _wait_for_workers(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            dead = [p.args for p in self.processes if p.poll() is not None]
            if dead:
                self.stop()
                raise SetupError(f"spark standalone process exited: {dead[0]} "
                                 f"(logs in {self.dir})")
            try:
                if len([w for w in self.state().get("workers", [])
                        if w.get("state") == "ALIVE"]) >= self.workers:
                    return
            except OSError:
                pass  # the master's web UI is not up yet
            time.sleep(0.5)
        self.stop()
        raise SetupError(f"{self.workers} spark workers did not register with "
                         f"{self.master_url} in time (logs in {self.dir})")
