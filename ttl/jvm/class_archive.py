"""The JVM's class-data archive: a local Spark driver maps its classes instead of loading them.

A ``ttl`` command that starts Spark spends seconds of its start-up loading and verifying the
same tens of thousands of classes (Spark, Delta, Kafka's client, Scala) every time: a
two-record ``ttl run --available-now`` took about 35 s, and its first Delta operation alone
7-8 s on a cold JVM. Java's application class-data sharing (a *dynamic* CDS archive, JDK 13+)
stores those classes parsed and verified in one file that the next JVMs map read-only.

``ttl setup`` builds the archive once (``ttl.archive_build``, which sits above the
application it runs): it runs the embedded demo (a local broker, a stream
with sweeps, publication and shutdown) in a JVM started with ``-XX:ArchiveClassesAtExit``,
so the archive holds what a real run loads. ``ttl.spark.session_settings`` then adds
``-XX:SharedArchiveFile`` to a *local* driver's options when the archive for this exact JVM
and classpath exists. A JVM refuses an archive made for another classpath or JDK build and
simply loads its classes as before; the archive's name is a digest of everything that
decides that (the JDK, PySpark's jars, the jar bundle, the classpath settings), so a changed
install finds no archive rather than a stale one. The JVM's own CDS messages go to stderr,
never to a command's standard output.

Only local drivers: under ``spark-submit`` or on a cluster the JVM is started elsewhere.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
from pathlib import Path

from ttl.jvm import jars

log = logging.getLogger(__name__)

SUFFIX = ".jsa"
# Settings and environment variables that change the driver JVM's classpath (or its heap
# layout: a heap of 32 GB or more turns compressed pointers off, which an archive records).
CLASSPATH_SETTINGS = ("spark.driver.extraClassPath", "spark.jars", "spark.jars.packages",
                      "spark.driver.memory")
CLASSPATH_ENV = ("SPARK_HOME", "SPARK_CONF_DIR", "SPARK_DIST_CLASSPATH", "HADOOP_CONF_DIR",
                 "YARN_CONF_DIR", "SPARK_CLASSPATH", "JAVA_HOME", "PYSPARK_SUBMIT_ARGS")
# The JVM reports an archive it cannot use as a warning on stdout; a command's stdout is
# its output (JSON, summaries), so CDS messages go to stderr instead.
LOG_OPTIONS = "-Xlog:cds*=off -Xlog:cds*=warning:stderr"


def archive_dir() -> Path:
    return jars.cache_root() / "cds"


def _java() -> Path | None:
    """The ``java`` that ``spark-submit`` starts: ``$JAVA_HOME/bin/java``, else the PATH's."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found else None


def _listing(directory: Path) -> list[str]:
    """Each jar of a directory with its size and modification time (what the JVM checks)."""
    if not directory.is_dir():
        return []
    return [f"{p}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
            for p in sorted(directory.glob("*.jar"))]


def key(settings: dict[str, str]) -> str | None:
    """A digest of what makes an archive usable by the driver these settings start: the JDK
    build, the classpath's jars, the settings and environment that extend it. ``None``
    without a ``java``."""
    import pyspark

    java = _java()
    if java is None:
        return None
    release = java.parent.parent / "release"  # the JDK's version and build
    conf_dir = os.environ.get("SPARK_CONF_DIR")  # its spark-defaults.conf may add jars
    defaults = Path(conf_dir, "spark-defaults.conf") if conf_dir else None
    parts = [str(java), release.read_text() if release.exists() else "",
             *_listing(Path(pyspark.__file__).parent / "jars"),
             *(f"{name}={settings.get(name, '')}" for name in CLASSPATH_SETTINGS),
             *(f"{name}={os.environ.get(name, '')}" for name in CLASSPATH_ENV),
             defaults.read_text() if defaults is not None and defaults.is_file() else ""]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archive_path(settings: dict[str, str]) -> Path | None:
    """Where the archive for these settings is (or would be) kept."""
    digest = key(settings)
    return archive_dir() / f"{digest}{SUFFIX}" if digest else None


def java_options(settings: dict[str, str]) -> str | None:
    """The driver's options that map the archive, when it was built for these settings."""
    path = archive_path(settings)
    if path is None or not path.is_file():
        return None
    try:
        os.utime(path)  # in use: ``_prune`` keeps archives used within its age
    except OSError:
        pass  # a read-only cache still serves
    return f"-XX:SharedArchiveFile={path} {LOG_OPTIONS}"
