"""Delta's log store for ``file:`` paths, compiled once into a jar beside the resolved jars.

Delta lists ``_delta_log`` at every snapshot update, several times per write and per start-up.
Its store for local paths (``HDFSLogStore``) asks Hadoop for the directory's statuses, which
stats every file, four per commit: with 30,000 commits a listing took 1.3-1.5 s, where reading
the directory's names took 0.06 s. A stream with a 2-second trigger writes 43,000 commits a
day, so a long-running local stream slowed down with the age of its log, not its data.
``FileLogStore.java`` lists the names and stats only those at or after the version asked
for, and writes a commit as a hard link of a temporary file, which refuses a version that
exists and starts no process (see its comment). It reads a log's names once a process:
``WatchedNames.java`` keeps them current from the kernel's change notifications (Linux's
inotify), exactly (each listing waits for the notifications of every change made before
it), so a listing no longer reads every name of a long log.
``LocalCheckpointFileManager.java``, Spark's checkpoint file manager for the stream's
offsets and commits and Delta's checksum files, writes local files the same way.

``ttl setup`` compiles it with the JDK's ``javac`` against the pinned Delta and Hadoop jars;
``ttl.spark.session_settings`` then names it as Delta's store for the ``file`` scheme. Without
a JDK (a JRE only), setup says so and Delta and Spark write and list the log as before.
The same jar holds ``S3ConditionalLogStore.java``, Delta's store for S3 with commits that
exclude other drivers (conditional PUTs) and listings from a key on (S3's ``start-after``,
where Delta's S3 store lists the whole log by default), for a profile to name
(``ttl.single_writer``), and ``PositionalDeletes.java``, the deletion vectors of ttl's
replace by position (``ttl.store.positional``), which is off without the jar, and
``KeyFilter.java``, the executors' fold's filter of the stored rows
(``ttl.store.distributed``), a join without it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

from ttl.errors import SetupError
from ttl.jvm import jars

SOURCE = Path(__file__).parent / "FileLogStore.java"
#: Compiled into the same jar: Delta's store for S3 with conditional commits
#: (``S3ConditionalLogStore.java``), which a profile names for its ``s3a`` paths.
SOURCES = (SOURCE, Path(__file__).parent / "S3ConditionalLogStore.java",
           Path(__file__).parent / "LocalCheckpointFileManager.java",
           Path(__file__).parent / "PositionalDeletes.java",
           Path(__file__).parent / "KeyFilter.java", Path(__file__).parent / "WatchedNames.java")
CLASS = "ttl.delta.FileLogStore"
#: The Hadoop setting (``spark.hadoop.`` + it, in Spark's) that turns off the store's watch of
#: a local log's directory (``WatchedNames.java``): every listing then reads its names.
WATCH_SETTING = "ttl.log.listing.watch"
#: The Spark setting that picks Delta's log store for a scheme.
SETTING = "spark.delta.logStore.file.impl"
#: Spark's checkpoint file manager, which writes a stream's offsets and commits and Delta's
#: checksum files (``LocalCheckpointFileManager.java``: Spark's own, with local files
#: written without starting processes; other file systems keep Spark's code).
CHECKPOINT_MANAGER_CLASS = "ttl.delta.LocalCheckpointFileManager"
CHECKPOINT_MANAGER_SETTING = "spark.sql.streaming.checkpointFileManagerClass"


def jar_path(versions: jars.Versions | None = None) -> Path:
    """Where the jar for this source and these Delta/Spark versions lives (built or not)."""
    v = versions or jars.Versions.load()
    digest = hashlib.sha256(
        b"".join(src.read_bytes() for src in SOURCES) + f"{v.spark}/{v.delta}".encode()
    ).hexdigest()[:12]
    return jars.cache_root() / "jars" / f"ttl-log-store-{digest}.jar"


def built(versions: jars.Versions | None = None) -> Path | None:
    """The jar if ``ttl setup`` built it, else None."""
    path = jar_path(versions)
    return path if path.exists() else None


def build(*, force: bool = False) -> tuple[Path | None, str]:
    """Compile the store into its jar if needed; returns the jar (None without a JDK) and
    what happened, for ``ttl setup`` to print."""
    target = jar_path()
    if target.exists() and not force:
        return target, "already built"
    javac = shutil.which("javac")
    if javac is None:
        return None, ("not built: no `javac` (a JDK) on PATH; Delta lists local logs with "
                      "Hadoop's listing, slower as the log grows")
    import pyspark

    classpath = [str(Path(pyspark.__file__).parent / "jars" / "*")]
    classpath += [str(p) for p in jars.jars("spark")
                  if p.name.startswith(("delta-storage", "delta-spark"))]
    with tempfile.TemporaryDirectory(prefix="ttl-log-store-") as tmp:
        classes = Path(tmp) / "classes"
        proc = subprocess.run(
            [javac, "--release", "17", "-nowarn", "-d", str(classes),
             "-cp", os.pathsep.join(classpath), *map(str, SOURCES)],
            capture_output=True, text=True)
        if proc.returncode != 0:
            raise SetupError(f"javac could not compile {', '.join(map(str, SOURCES))}:\n"
                             f"{proc.stderr[-3000:]}")
        staging = target.with_suffix(".jar.tmp")
        with zipfile.ZipFile(staging, "w", zipfile.ZIP_DEFLATED) as jar:
            jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\r\n\r\n")
            for cls in sorted(classes.rglob("*.class")):
                jar.write(cls, cls.relative_to(classes).as_posix())
        os.replace(staging, target)  # a reader never sees half a jar
    return target, "built"


def named(settings: dict[str, str]) -> bool:
    """Whether ``settings`` name one of the jar's stores (its classes are ``ttl.delta.*``):
    the jar must then be on the classpath."""
    return any(str(value).startswith("ttl.delta.") for value in settings.values())


def add_to(settings: dict[str, str]) -> dict[str, str]:
    """``settings`` with the store named for ``file:`` paths, the checkpoint file manager
    (``CHECKPOINT_MANAGER_CLASS``), each unless the settings name their own, and the jar
    on ``spark.jars`` whenever it is built (it also holds the writes by position,
    ``ttl.store.positional``; pure but for the jar's existence)."""
    jar = built()
    if jar is None:
        return settings
    # Delta refuses a scheme's store beside ``spark.delta.logStore.class`` (older profiles
    # set that one): a profile that names either keeps its own.
    ours = {} if SETTING in settings or "spark.delta.logStore.class" in settings \
        else {SETTING: CLASS}
    if CHECKPOINT_MANAGER_SETTING not in settings:
        ours[CHECKPOINT_MANAGER_SETTING] = CHECKPOINT_MANAGER_CLASS
    current = settings.get("spark.jars", "")
    return {**settings, **ours, "spark.jars": f"{current},{jar}" if current else str(jar)}
