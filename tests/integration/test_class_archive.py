"""The class-data archive ``ttl setup`` builds, as the JVMs of this machine use it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from ttl.jvm import class_archive
from ttl.spark import session_settings


def _built() -> Path:
    path = class_archive.archive_path(session_settings())
    assert path is not None and path.is_file(), f"no class-data archive at {path}: run `ttl setup`"
    return path


def test_a_local_session_maps_the_archive_that_setup_built(spark):
    path = _built()
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
                     .getInputArguments())
    assert f"-XX:SharedArchiveFile={path}" in arguments
    pid = jvm.java.lang.ProcessHandle.current().pid()
    assert str(path) in Path(f"/proc/{pid}/maps").read_text()      # mapped, not refused


def test_a_local_session_runs_the_parallel_collector(spark):
    """``ttl.spark.LOCAL_DRIVER_GC``, with the archive above mapped beside it."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory \
        .getGarbageCollectorMXBeans()
    assert sorted(bean.getName() for bean in beans) == ["PS MarkSweep", "PS Scavenge"]


def test_an_archive_the_jvm_cannot_use_is_a_line_on_stderr_and_the_jvm_runs(tmp_path):
    """Another classpath (here: none) than the archive's: the JVM starts without it and
    says so on stderr; a command's stdout stays its own."""
    proc = subprocess.run([shutil.which("java"), f"-XX:SharedArchiveFile={_built()}",
                           *class_archive.LOG_OPTIONS.split(), "-version"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout == ""
    assert "Unable to use shared archive" in proc.stderr
