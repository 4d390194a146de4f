"""Build the ``spark-submit`` command for a job from a configuration profile.

    deploy/submit --conf conf/local.toml jobs/stream.py -- --available-now
    deploy/submit --print --conf conf/cluster.example.toml jobs/drill.py

What it puts together:

* ``--master`` from ``spark.master``; ``--properties-file conf/spark-defaults.conf`` plus the
  profile's ``[spark.settings]`` as ``--conf``;
* the JVM jars: the local Maven bundle (``--jars``, default) or ``--packages`` coordinates
  (``--packages`` flag) for a cluster that resolves from Maven Central itself;
* the ``ttl`` package as a wheel (``--py-files``): it is pure Python, so executors import it
  straight from the shipped file, with no virtual environment to pack (third-party Python
  dependencies, pyspark aside, are needed on the driver only: confluent-kafka, APScheduler,
  pydantic, click run in the driver process; executors run ``ttl.model``/``ttl.store.fold``,
  which need only the standard library and pyarrow, which PySpark's own Arrow path needs);
* the profile itself with ``--files`` (and as the job's ``--conf`` argument).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ttl import jars
from ttl.config import REPO_ROOT, load
from ttl.spark import LOG4J2, SPARK_DEFAULTS


def build_wheel(out_dir: Path) -> Path:
    """Build the ``ttl`` wheel (no dependencies) into ``out_dir``; returns its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob("ttl-*.whl"):
        old.unlink()
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(out_dir), str(REPO_ROOT)], check=True)
    return next(out_dir.glob("ttl-*.whl"))


def command(conf_path: Path, job: Path, job_args: list[str], *, packages: bool = False,
            wheel: Path | None = None, deploy_mode: str = "client") -> list[str]:
    conf = load(conf_path)
    spark_submit = str(Path(sys.executable).parent / "spark-submit")
    cmd = [spark_submit, "--master", conf.spark.master, "--deploy-mode", deploy_mode,
           "--name", conf.spark.app_name, "--properties-file", str(SPARK_DEFAULTS)]
    java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
    settings = {"spark.driver.extraJavaOptions": java_opts,
                "spark.executor.extraJavaOptions": java_opts,
                "spark.pyspark.python": sys.executable, **conf.spark.settings}
    for key, value in settings.items():
        cmd += ["--conf", f"{key}={value}"]
    if packages:
        cmd += ["--packages", ",".join(jars.Versions.load().spark_packages())]
    else:
        cmd += ["--jars", ",".join(str(p) for p in jars.jars("spark"))]
    if wheel is not None:
        cmd += ["--py-files", str(wheel)]
    cmd += ["--files", str(conf_path), str(job), "--conf", str(conf_path), *job_args]
    return cmd


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/submit", description=__doc__.splitlines()[0])
    parser.add_argument("--conf", type=Path, default=Path("conf/local.toml"))
    parser.add_argument("--print", action="store_true", help="Print the command, run nothing.")
    parser.add_argument("--packages", action="store_true",
                        help="Use --packages coordinates instead of the local jar bundle.")
    parser.add_argument("--deploy-mode", default="client", choices=["client", "cluster"])
    parser.add_argument("job", type=Path)
    parser.add_argument("job_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    job_args = [a for a in args.job_args if a != "--"]
    wheel = None if args.print else build_wheel(REPO_ROOT / "build" / "dist")
    cmd = command(args.conf, args.job, job_args, packages=args.packages,
                  wheel=wheel or REPO_ROOT / "build" / "dist" / "ttl-<version>.whl",
                  deploy_mode=args.deploy_mode)
    if args.print:
        print(shlex.join(cmd))
        return 0
    venv_bin = str(Path(sys.executable).parent)
    env = {**os.environ, "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYSPARK_PYTHON": sys.executable}
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
