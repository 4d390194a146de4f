"""Building the class-data archive (``ttl setup``): a training run of the embedded demo.

Apart from ``ttl.jvm.class_archive`` (where an archive is and which options map it),
because training runs the whole application: the session factory needs the archive's
options, and must not depend on the application that sits above it.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ttl import commands
from ttl.config import load
from ttl.jvm.class_archive import SUFFIX, archive_dir, archive_path
from ttl.spark import session_settings

log = logging.getLogger(__name__)

# What the demo run that trains the archive lasts: long enough for several batches, a
# sweep, a publication and a stop; the archive holds the classes loaded by then.
TRAIN_SECONDS = 12
TRAIN_TIMEOUT_S = 600


def build(*, force: bool = False) -> tuple[Path | None, str]:
    """Build the archive for the default local session (``ttl setup``); returns its path
    and what happened. Never raises: without an archive every JVM still starts, only
    slower, so a failure is reported and setup goes on."""
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

    with tempfile.TemporaryDirectory(prefix="ttl-cds-") as root:
        profile = Path(root) / "cds.toml"
        profile.write_text(_PROFILE.format(root=root, out=out))
        commands.run(load(profile), demo_seconds=TRAIN_SECONDS)
        gateway = SparkContext._gateway
        SparkContext._active_spark_context.stop()
        jvm = gateway.proc
        jvm.stdin.close()  # the gateway server exits on EOF; the archive is written then
        jvm.wait(TRAIN_TIMEOUT_S)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO)
    train(Path(sys.argv[1]))
