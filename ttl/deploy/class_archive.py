"""The JVM's class-data archive: a local Spark driver maps its classes instead of loading them.

A ``ttl`` command that starts Spark spends seconds of its start-up loading and verifying the
same tens of thousands of classes (Spark, Delta, Kafka's client, Scala) every time: a
two-record ``ttl run --available-now`` took about 35 s, and its first Delta operation alone
7-8 s on a cold JVM. Java's application class-data sharing (a *dynamic* CDS archive, JDK 13+)
stores those classes parsed and verified in one file that the next JVMs map read-only.

``ttl setup`` builds the archive once: it runs the embedded demo (a local broker, a stream
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

import fcntl
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ttl.deploy import jars

log = logging.getLogger(__name__)

SUFFIX = ".jsa"
# What the demo run that trains the archive lasts: long enough for several batches, a
# sweep, a publication and a stop; the archive holds the classes loaded by then.
TRAIN_SECONDS = 12
TRAIN_TIMEOUT_S = 600
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


def build(*, force: bool = False) -> tuple[Path | None, str]:
    """Build the archive for the default local session (``ttl setup``); returns its path
    and what happened. Never raises: without an archive every JVM still starts, only
    slower, so a failure is reported and setup goes on."""
    from ttl.spark import session_settings

    path = archive_path(session_settings())
    if path is None:
        return None, "no java found: no class-data archive"
    if path.is_file() and not force:
        return path, "already built"
    path.parent.mkdir(parents=True, exist_ok=True)
    with (path.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time (two setups, two clones)
        if path.is_file() and not force:
            return path, "already built (by another setup)"
        path.unlink(missing_ok=True)  # the training JVM must not map the one it replaces
        partial = path.with_name(f"{path.stem}.{os.getpid()}.partial")
        started = time.monotonic()
        failure = _train_into(partial)
        if failure is not None:
            partial.unlink(missing_ok=True)
            return None, f"{failure}: no class-data archive"
        partial.replace(path)
        _prune(keep=path)
    return path, f"built in {time.monotonic() - started:.0f} s"


def _train_into(partial: Path) -> str | None:
    """Run the training in a process group of its own (the JVM, the broker and the demo
    die with it on a timeout); ``None`` once ``partial`` holds the archive, else why not."""
    proc = subprocess.Popen([sys.executable, "-m", __name__, str(partial)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=TRAIN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return f"the training run timed out after {TRAIN_TIMEOUT_S} s"
    if proc.returncode != 0 or not partial.is_file() or partial.stat().st_size == 0:
        try:  # its JVM would write the archive as it exits, after we gave up on it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return f"the training run failed (exit {proc.returncode})\n{output[-1500:]}"
    return None


def _prune(keep: Path, max_age_s: float = 7 * 86_400) -> None:
    """Drop other archives no session mapped for a week (another clone's or an older
    install's: each is ~200 MB; ``java_options`` touches the one it hands out) and partial
    files a killed build left."""
    cutoff = time.time() - max_age_s
    for other in [*archive_dir().glob(f"*{SUFFIX}"), *archive_dir().glob("*.partial")]:
        try:
            if other != keep and other.stat().st_mtime < cutoff:
                other.unlink(missing_ok=True)
        except OSError:
            continue  # gone meanwhile, or not ours to remove


_PROFILE = """
[store]
name = "cds"
path = "{root}/store"
ttl = "5s"
[kafka]
input_topic = "cds-input"
changelog_topic = "cds-changelog"
[eviction]
clock = "both"
interval = "2s"
[stream]
checkpoint = "{root}/checkpoint"
trigger = "1s"
max_offsets_per_trigger = 200
[spark.settings]
"spark.driver.extraJavaOptions" = "-XX:ArchiveClassesAtExit={out}"
"""


def train(out: Path) -> None:
    """Run the embedded demo in this process's JVM, stop it, and wait for the JVM to exit
    (it writes the archive ``out`` as it exits)."""
    from pyspark import SparkContext

    from ttl import app
    from ttl.config import load

    with tempfile.TemporaryDirectory(prefix="ttl-cds-") as root:
        profile = Path(root) / "cds.toml"
        profile.write_text(_PROFILE.format(root=root, out=out))
        app.run(load(profile), demo_seconds=TRAIN_SECONDS)
        gateway = SparkContext._gateway
        SparkContext._active_spark_context.stop()
        jvm = gateway.proc
        jvm.stdin.close()  # the gateway server exits on EOF; the archive is written then
        jvm.wait(TRAIN_TIMEOUT_S)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    train(Path(sys.argv[1]))
