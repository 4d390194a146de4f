"""The SparkSession factory: Delta Lake and Spark's Kafka connector, local or on a cluster.

Settings come, in increasing precedence, from ``conf/spark-defaults.conf``, the profile's
``[spark]`` table and the caller's ``overrides``. Jars come from the local Maven cache
(``ttl setup``) unless the caller already set ``spark.jars`` or ``spark.jars.packages`` (a
cluster submits them with ``--jars``/``--packages``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import re
import time
from pathlib import Path

from ttl.config import CONF_DIR, SparkConfig, read_spark_defaults
from ttl.jvm import class_archive, jars, log_store

log = logging.getLogger(__name__)

LOG4J2 = CONF_DIR / "log4j2.properties"

#: A local driver's garbage collector: the Parallel collector, not the JVM's default G1. A
#: local driver is also the job's only executor, and on a small machine G1's concurrent
#: threads and write barriers compete with the JIT and the batches for the same cores.
#: Measured (``tests.bench.compare --records 1000000``, alternated twice): W1 33.0k/35.7k ->
#: 37.6k/40.5k records/s, W2 19.9k/18.6k -> 20.9k/20.2k, the JVM's CPU-seconds per 100k
#: records 4.0-4.1 -> 3.4-3.6 (W1); a 60 s trickle's p99 2.64/3.31 s -> 2.68/2.77 s. A
#: cluster driver (or one under spark-submit, or ``local-cluster``'s) keeps its JVM's
#: default, and a collector named wherever the driver's JVM takes options from wins
#: (``_collector_named``: two would stop the JVM from starting).
LOCAL_DRIVER_GC = "-XX:+UseParallelGC"

#: An option that chooses a collector (naming two stops the JVM from starting). Listed by
#: name: ``-XX:+UseAdaptiveSizePolicyWithSystemGC`` and the like also end in ``GC`` and
#: choose none.
_COLLECTOR = re.compile(
    r"-XX:\+Use(Serial|Parallel|ParallelOld|G1|Z|Shenandoah|Epsilon|ConcMarkSweep)GC\b")
#: Where else a local driver's JVM takes options from: Spark's launcher puts
#: ``SPARK_SUBMIT_OPTS`` on its command line, and the JVM reads the other three itself.
_JAVA_OPTIONS_ENV = ("SPARK_SUBMIT_OPTS", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS",
                     "_JAVA_OPTIONS")


def _launcher_conf_dir() -> Path | None:
    """The configuration folder Spark's launcher reads: ``SPARK_CONF_DIR``, else
    ``$SPARK_HOME/conf``, where PySpark's own package is the home when none is set."""
    if os.environ.get("SPARK_CONF_DIR"):
        return Path(os.environ["SPARK_CONF_DIR"])
    home = os.environ.get("SPARK_HOME")
    if not home:
        spec = importlib.util.find_spec("pyspark")  # found, not imported
        home = str(Path(spec.origin).parent) if spec and spec.origin else ""
    return Path(home) / "conf" if home else None


def _collector_named(settings: dict[str, str]) -> bool:
    """Whether the driver's JVM is told its collector already: in the session's driver
    options (``extraJavaOptions``; ``defaultJavaOptions``, which Spark's launcher puts
    before them, here or in its ``spark-defaults.conf``: ``_launcher_conf_dir``) or in the
    environment (``_JAVA_OPTIONS_ENV``). The launcher's own ``extraJavaOptions`` are not
    asked: the session's replace them."""
    conf_dir = _launcher_conf_dir()
    launcher = read_spark_defaults(conf_dir / "spark-defaults.conf") if conf_dir else {}
    named = [settings.get("spark.driver.extraJavaOptions", ""),
             settings.get("spark.driver.defaultJavaOptions", ""),
             launcher.get("spark.driver.defaultJavaOptions", ""),
             *(os.environ.get(name, "") for name in _JAVA_OPTIONS_ENV)]
    return any(_COLLECTOR.search(options) for options in named)


def session_settings(
    conf: SparkConfig | None = None, overrides: dict[str, str] | None = None
) -> dict[str, str]:
    """Every Spark setting a ttl session gets, in precedence order (pure; testable)."""
    conf = conf or SparkConfig()
    settings = {
        **read_spark_defaults(),
        "spark.master": conf.master,
        "spark.app.name": conf.app_name,
        **conf.settings,
        **(overrides or {}),
    }
    under_submit = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit passed jars already
    if not under_submit and "spark.jars" not in settings and "spark.jars.packages" not in settings:
        local = jars.jars("spark")
        if conf.packages:  # a profile's extras (e.g. hadoop-aws): resolved by ``ttl setup``,
            extra = jars.packages_jars(conf.packages)  # else by Spark's Ivy at start
            if extra is None:
                settings["spark.jars.packages"] = ",".join(conf.packages)
            else:
                local = [*local, *extra]
        settings["spark.jars"] = ",".join(str(p) for p in local)
        settings = log_store.add_to(settings)  # local logs listed in one directory read
    if LOG4J2.exists():
        java_opts = f"-Dlog4j2.configurationFile=file:{LOG4J2}"
        for key in ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions"):
            settings[key] = f"{java_opts} {settings.get(key, '')}".strip()
    if not under_submit and settings["spark.master"].startswith("local"):
        key = "spark.driver.extraJavaOptions"
        archived = class_archive.java_options(settings)  # a local driver maps its classes
        if archived:
            settings[key] = f"{archived} {settings.get(key, '')}".strip()
        # Not for ``local-cluster``, whose executors are JVMs of their own.
        if re.fullmatch(r"local(\[.*\])?", settings["spark.master"]) \
                and not _collector_named(settings):
            settings[key] = f"{LOCAL_DRIVER_GC} {settings.get(key, '')}".strip()
    return settings


def get_session(conf: SparkConfig | None = None, overrides: dict[str, str] | None = None):
    """Return the (one per process) SparkSession configured for Delta and Kafka."""
    from pyspark.sql import SparkSession

    settings = session_settings(conf, overrides)
    # The executors' Python: Spark reads ``spark.pyspark.python`` only under spark-submit,
    # so a profile's setting is passed the way PySpark takes it here.
    if "spark.pyspark.python" in settings:
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", _python())
    # Locally, bind to loopback (the machine's other addresses may be unroutable); a cluster
    # deployment sets SPARK_LOCAL_IP itself.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    builder = SparkSession.builder
    for key, value in settings.items():
        builder = builder.config(key, value)
    started = time.monotonic()
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    ship_package(session)
    log.info("spark session ready in %.1f s (master %s)", time.monotonic() - started,
             session.sparkContext.master)
    return session


def package_zip() -> Path:
    """This ``ttl`` package as a zip (its ``.py`` files; cached under ttl's cache by a
    digest of them): what executors put on their path (``--py-files``, ``addPyFile``).
    A zip, not a wheel: PySpark adds ``.zip``, ``.egg`` and ``.jar`` files to the Python
    workers' path, and only ships a ``.whl``, which nothing then imports."""
    import zipfile

    package = Path(__file__).resolve().parent  # this module's package: ttl
    sources = sorted(p for p in package.rglob("*.py") if "__pycache__" not in p.parts)
    digest = hashlib.sha256()
    for source in sources:
        digest.update(source.relative_to(package).as_posix().encode())
        digest.update(source.read_bytes())
    target = jars.cache_root() / "py" / f"ttl-{digest.hexdigest()[:12]}.zip"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(f".{os.getpid()}.tmp")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for source in sources:
                archive.write(source, (Path("ttl") / source.relative_to(package)).as_posix())
        partial.replace(target)
    return target


def ship_package(session) -> Path | None:
    """Give a cluster's executors this ``ttl`` (``package_zip``): they fold batches
    (``ttl.store.distributed``) and must run the driver's code, not whatever their Python
    has. Not in local mode (one process, one ``ttl``), nor under ``spark-submit``, where
    ``ttl submit`` ships it (``--py-files``)."""
    if session.sparkContext.master.startswith("local") or "PYSPARK_GATEWAY_PORT" in os.environ:
        return None
    target = package_zip()
    session.sparkContext.addPyFile(str(target))
    return target


def _python() -> str:
    import sys

    return sys.executable
