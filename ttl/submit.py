"""Build the ``spark-submit`` command for a job from a configuration profile.

    ttl submit --conf conf/local.toml jobs/stream.py -- --available-now
    ttl submit --print --conf conf/cluster.example.toml jobs/drill.py

(``deploy/submit`` is the same command, for scripts written before ``ttl submit``.)

What it puts together:

* ``--master`` from ``spark.master``; ``--properties-file conf/spark-defaults.conf`` plus the
  profile's ``[spark.settings]`` as ``--conf``;
* the JVM jars: the local Maven bundle (``--jars``, default) or ``--packages`` coordinates
  (``--packages`` flag) for a cluster that resolves from Maven Central itself;
* the ``ttl`` package as a zip (``--py-files``, ``ttl.spark.package_zip``): it is pure
  Python, so there is no virtual environment to pack. The driver runs all of it; the
  executors run the batch fold (``ttl.store.distributed``), which needs only pyarrow,
  numpy and pandas beside PySpark (what PySpark's Arrow functions need anyway); the
  driver's other dependencies (confluent-kafka, APScheduler, pydantic, click, deltalake)
  stay on the driver;
* the profile itself with ``--files`` (and as the job's ``--conf`` argument).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from ttl.config import SPARK_DEFAULTS, Config, load
from ttl.errors import SetupError
from ttl.jvm import jars, log_store
from ttl.spark import LOG4J2, package_zip


def spark_settings(conf: Config, *, local_python: bool = True) -> dict[str, str]:
    """The ``--conf`` settings of a submit (on top of ``--properties-file``): log4j2, the
    Python executors run, and the profile's ``[spark.settings]`` (which win). The Kubernetes
    manifests carry the same settings (tests/unit/test_deploy.py checks it)."""
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
    settings = {"spark.driver.extraJavaOptions": java_opts,
                "spark.executor.extraJavaOptions": java_opts}
    if local_python:
        settings["spark.pyspark.python"] = sys.executable
    return {**settings, **conf.spark.settings}


def packages(conf: Config, *, all_packages: bool) -> list[str]:
    """Maven coordinates for ``--packages``: the profile's extras, plus Delta and the Kafka
    connector when the cluster resolves everything from Maven Central itself."""
    core = jars.Versions.load().spark_packages() if all_packages else []
    return [*core, *conf.spark.packages]


def command(conf_path: Path, job: Path, job_args: list[str], *, packages_flag: bool = False,
            package: Path | None = None, deploy_mode: str = "client") -> list[str]:
    """The spark-submit argument list for ``job`` under the profile at ``conf_path``."""
    conf = load(conf_path)
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    cmd = [spark_submit, "--master", conf.spark.master, "--deploy-mode", deploy_mode,
           "--name", conf.spark.app_name, "--properties-file", str(SPARK_DEFAULTS)]
    settings = spark_settings(conf)
    # spark-submit takes ``--jars`` over a ``spark.jars`` setting: the profile's go with it
    own = [j for j in settings.pop("spark.jars", "").split(",") if j]
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    shipped = [*([] if packages_flag else [str(p) for p in jars.jars("spark")]), *own]
    # ttl's own jar goes whenever it is built: its log stores, and the driver's writes by
    # position (``ttl.store.positional``), which without it fall back to Delta's, slower.
    jar = log_store.built()
    if jar is None and log_store.named(conf.spark.settings):
        raise SetupError(f"{conf_path} names a ttl.delta log store, whose jar is not "
                         "built: run `ttl setup` (with a JDK) first")
    if jar is not None:
        shipped.append(str(jar))
    if shipped:
        cmd += ["--jars", ",".join(shipped)]
    coordinates = packages(conf, all_packages=packages_flag)
    if coordinates:
        cmd += ["--packages", ",".join(coordinates)]
    if package is not None:
        cmd += ["--py-files", str(package)]
    # In cluster deploy mode the driver runs remotely and finds the --files copy by its name.
    job_conf = conf_path.name if deploy_mode == "cluster" else str(conf_path)
    cmd += ["--files", str(conf_path), str(job), "--conf", job_conf, *job_args]
    return cmd


def submit(conf_path: Path, job: Path, job_args: list[str], *, print_only: bool = False,
           packages_flag: bool = False, deploy_mode: str = "client") -> int:
    """Run (or, with ``print_only``, print) the job's ``spark-submit`` command: ``ttl
    submit``. Returns spark-submit's exit code."""
    job_args = [a for a in job_args if a != "--"]
    cmd = command(conf_path, job, job_args, packages_flag=packages_flag,
                  package=package_zip(), deploy_mode=deploy_mode)
    if print_only:
        print(shlex.join(cmd))
        return 0
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable}
    return subprocess.call(cmd, env=env)
