"""``ttl.jvm.log_store``: the session lists local Delta logs with ``FileLogStore``, which
returns what Delta's own ``HDFSLogStore`` returns, from any start, on a real table's log."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from deltalake import DeltaTable

from tests.integration.test_eviction import make_store, recs
from ttl import eviction
from ttl.jvm import log_store

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def _listing(spark, store_class, path: str) -> list[tuple[str, int, bool]]:
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    store = jvm.__getattr__(store_class)(conf)  # py4j resolves a dotted class name
    found = store.listFrom(jvm.org.apache.hadoop.fs.Path(path), conf)
    out = []
    while found.hasNext():
        status = found.next()
        out.append((status.getPath().toString(), status.getLen(), status.isDirectory()))
    return out


def test_the_session_lists_local_logs_with_the_file_log_store(spark):
    assert log_store.built() is not None, "ttl setup builds the log store (needs javac)"
    assert spark.conf.get(log_store.SETTING) == log_store.CLASS


def test_file_log_store_lists_what_delta_lists_from_every_start(spark, table_path):
    store = make_store(spark, table_path, ttl=1_000)
    for i in range(12):  # commits, Delta's and Hadoop's checksum files, a checkpoint
        store.apply_records(recs((b"k%d" % i, b"v", NOW + i)))
    eviction.sweep(store, "wall", NOW + 5_000)
    DeltaTable(table_path).create_checkpoint()
    # a file copied in from elsewhere, a colon in its name (Hadoop lists it; so must we)
    (Path(table_path) / "_delta_log" / f"{9:020d}.json:Zone.Identifier").write_text("x")
    log = f"file:{table_path}/_delta_log"
    starts = [f"{log}/{v:020d}." for v in (0, 1, 7, 12, 13, 99)]
    starts += [f"{log}/{v:020d}.checkpoint.parquet" for v in (0, 10)]
    starts += [f"{log}/_last_checkpoint", f"{log}/"]
    for start in starts:
        ours = _listing(spark, "ttl.delta.FileLogStore", start)
        delta = _listing(spark, "io.delta.storage.HDFSLogStore", start)
        assert ours == delta, start
    everything = _listing(spark, "ttl.delta.FileLogStore", f"{log}/{0:020d}.")
    names = [p.rsplit("/", 1)[1] for p, _, _ in everything]
    assert f"{13:020d}.json" in names and "_last_checkpoint" in names
    assert f"{9:020d}.json:Zone.Identifier" in names
    assert not any(n.startswith(".") for n in names)  # Hadoop's checksums stay hidden


def test_file_log_store_refuses_a_missing_directory_as_delta_does(spark, tmp_path):
    missing = f"file:{tmp_path}/nothing/_delta_log/{0:020d}."
    for store_class in ("ttl.delta.FileLogStore", "io.delta.storage.HDFSLogStore"):
        with pytest.raises(Exception, match="FileNotFoundException"):
            _listing(spark, store_class, missing)


def _reads(spark) -> int:
    return int(spark._jvm.ttl.delta.WatchedNames.reads())


def _exchange(a: Path, b: Path) -> None:
    """Swap two names in one call (``renameat2``'s ``RENAME_EXCHANGE``): inotify reports the
    first name as removed although it is still there."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, bytes(a), at_fdcwd, bytes(b), rename_exchange) != 0:
        raise OSError(ctypes.get_errno(), "renameat2", str(a))


def test_the_watched_listing_equals_a_read_of_the_directory_through_any_change(spark,
                                                                              tmp_path):
    """Names created, removed, renamed, swapped, moved between two logs and hard-linked by
    another process (here, this Python one) between listings, a mass removal past the
    watch's 512 events, and a log removed and made again: every listing from any start
    equals ``HDFSLogStore``'s; a log's names are read in full only on its first listing,
    after the overflow and after it was made again; with the watch off, at every listing."""
    import random

    rng = random.Random(20261130)
    logs = [tmp_path / "a" / "_delta_log", tmp_path / "b" / "_delta_log"]
    for log in logs:
        log.mkdir(parents=True)
    names = [f"{v:020d}{suffix}" for v in range(40)
             for suffix in (".json", ".crc", ".checkpoint.parquet")]
    names += [f".{v:020d}.json.crc" for v in range(40)]
    names += ["_last_checkpoint", f"{7:020d}.json:Zone.Identifier",
              f"{5:020d}.7.compacted.json", "A", f"{9_000_000_000:020d}.json",
              f"{100_000_000:020d}.crc"]  # past the versions kept as bits
    odd_starts = ["A", ".0", "0", f"{0:020d}", f"{99_999_999_999:020d}.", "_last_checkpoint",
                  f"{12:020d}.checkpoint.parquet", f".{3:020d}.json.crc"]

    def check() -> None:
        for log in logs:
            for start in [f"{rng.randrange(45):020d}." for _ in range(3)] + odd_starts:
                path = f"file:{log}/{start}"
                assert _listing(spark, "ttl.delta.FileLogStore", path) == \
                    _listing(spark, "io.delta.storage.HDFSLogStore", path), (log, start)

    check()
    first = _reads(spark)
    for step in range(200):
        log = rng.choice(logs)
        present = [p.name for p in log.iterdir() if p.is_file()]
        action = rng.random()
        if action < 0.4 or len(present) < 2:
            name = rng.choice(names)
            temp = log / f".{name}.{step}.tmp"
            temp.write_text(str(step))
            if rng.random() < 0.5:
                os.replace(temp, log / name)  # a rename (an overwrite if it is there)
            else:
                if not (log / name).exists():
                    os.link(temp, log / name)  # FileLogStore's own way
                temp.unlink()
        elif action < 0.7:
            (log / rng.choice(present)).unlink()
        elif action < 0.8:
            a, b = rng.sample(present, 2)
            _exchange(log / a, log / b)
        elif action < 0.9:
            other = logs[1] if log == logs[0] else logs[0]
            os.replace(log / rng.choice(present), other / rng.choice(names))
        else:
            (log / "_sidecars").mkdir(exist_ok=True)
        if step % 4 == 0:
            check()
    check()
    assert _reads(spark) == first, "the watch answered every listing after the first"
    log = logs[0]
    for name in [p.name for p in log.iterdir() if p.is_file()]:
        (log / name).unlink()
    for v in range(600):  # more events than a key holds: read again once
        (log / f"{1000 + v:020d}.json").write_text("x")
    check()
    assert _reads(spark) == first + 1
    shutil.rmtree(log)
    log.mkdir()
    (log / f"{3:020d}.json").write_text("x")
    check()
    assert _reads(spark) == first + 2
    conf = spark._jsc.hadoopConfiguration()
    conf.setBoolean(log_store.WATCH_SETTING, False)
    try:
        check()
    finally:
        conf.unset(log_store.WATCH_SETTING)
    assert _reads(spark) == first + 2  # the store read the directory itself


def test_a_commit_by_another_writer_is_seen_at_the_next_snapshot_update(spark, tmp_path):
    """delta-rs commits beside the session (not through its log store): each new version is
    in Delta's next snapshot, listed through the watch."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from ttl import delta_log

    path = str(tmp_path / "table")
    write_deltalake(path, pa.table({"x": [0]}))
    assert delta_log.latest_version(spark, path) == 0
    reads = _reads(spark)
    for version in range(1, 6):
        write_deltalake(path, pa.table({"x": [version]}), mode="append")
        assert delta_log.latest_version(spark, path) == version
    assert _reads(spark) == reads


def _jpath(spark, path):
    return spark._jvm.org.apache.hadoop.fs.Path(f"file:{path}")


def _lines(spark, *lines: str):
    return spark._jvm.java.util.ArrayList(list(lines)).iterator()


def test_file_log_store_writes_a_name_once_and_overwrites_only_when_asked(spark, tmp_path):
    """A commit is a hard link (never replaces a version another writer wrote), with the
    lines ``HDFSLogStore`` writes; an overwrite (``_last_checkpoint``) replaces the file and
    drops Hadoop's checksum of the old content; no temporary file is left behind."""
    jvm, conf = spark._jvm, spark._jsc.hadoopConfiguration()
    ours, delta = jvm.ttl.delta.FileLogStore(conf), jvm.io.delta.storage.HDFSLogStore(conf)
    ours.write(_jpath(spark, tmp_path / "a.json"), _lines(spark, "x", "y"), False, conf)
    delta.write(_jpath(spark, tmp_path / "b.json"), _lines(spark, "x", "y"), False, conf)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes() == b"x\ny\n"
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        ours.write(_jpath(spark, tmp_path / "a.json"), _lines(spark, "z"), False, conf)
    assert (tmp_path / "a.json").read_text() == "x\ny\n"
    assert (tmp_path / ".b.json.crc").exists()  # Hadoop's, written by HDFSLogStore
    ours.write(_jpath(spark, tmp_path / "b.json"), _lines(spark, "z"), True, conf)
    assert (tmp_path / "b.json").read_text() == "z\n"
    assert not (tmp_path / ".b.json.crc").exists()
    assert list(ours.read(_jpath(spark, tmp_path / "b.json"), conf)) == ["z"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json"]


def test_the_checkpoint_file_manager_writes_a_name_once_and_overwrites_when_asked(spark,
                                                                                  tmp_path):
    """Spark's atomic write through ``LocalCheckpointFileManager``: the content under its name
    at close, an existing name refused (Hadoop's ``FileAlreadyExistsException``, which Spark
    and Delta catch) and kept, an overwrite when asked, nothing left of a cancelled write."""
    assert spark.conf.get(log_store.CHECKPOINT_MANAGER_SETTING) == \
        log_store.CHECKPOINT_MANAGER_CLASS
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()  # with the session's settings
    manager = (jvm.org.apache.spark.sql.execution.streaming.checkpointing
               .CheckpointFileManager.create(_jpath(spark, tmp_path), conf))
    assert manager.getClass().getName() == log_store.CHECKPOINT_MANAGER_CLASS

    def write(name: str, data: bytes, overwrite: bool, cancel: bool = False) -> None:
        out = manager.createAtomic(_jpath(spark, tmp_path / name), overwrite)
        out.write(bytearray(data))
        out.cancel() if cancel else out.close()

    write("0", b"first", False)
    assert (tmp_path / "0").read_bytes() == b"first"
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        write("0", b"second", False)
    assert (tmp_path / "0").read_bytes() == b"first"
    write("0", b"third", True)
    assert (tmp_path / "0").read_bytes() == b"third"
    write("1", b"never", False, cancel=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["0"]
    assert manager.exists(_jpath(spark, tmp_path / "0"))


def test_two_file_log_stores_racing_for_a_version_never_both_win(spark, tmp_path):
    """Two writers (two store instances, as two drivers would hold) write each of a dozen
    versions at once: exactly one wins each, and the file holds what it wrote."""
    import threading

    conf = spark._jsc.hadoopConfiguration()
    stores = {tag: spark._jvm.ttl.delta.FileLogStore(conf) for tag in ("a", "b")}
    for version in range(12):
        path = tmp_path / f"{version:020d}.json"
        won, failed = [], []
        start = threading.Barrier(2)

        def write(tag: str, path=path, won=won, failed=failed, start=start) -> None:
            start.wait()
            try:
                stores[tag].write(_jpath(spark, path), _lines(spark, tag), False, conf)
                won.append(tag)
            except Exception as exc:  # noqa: BLE001 - the loser's refusal is expected
                failed.append(str(exc))

        threads = [threading.Thread(target=write, args=(tag,)) for tag in stores]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert len(won) == 1, (version, won, failed)
        assert all("FileAlreadyExistsException" in f for f in failed), failed
        assert path.read_text() == f"{won[0]}\n"
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_the_checkpoint_file_manager_keeps_sparks_fallback_without_a_file_context(spark,
                                                                                   tmp_path):
    """Once named, Spark asks this manager for every path: one on a file system without a
    ``FileContext`` binding (``s3://`` mapped to S3A, say) gets the ``FileSystem``-based
    manager Spark falls back to, instead of failing the query or Delta's checksum."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    conf.set("fs.nofc.impl", "org.apache.hadoop.fs.RawLocalFileSystem")  # no AbstractFileSystem
    path = jvm.org.apache.hadoop.fs.Path(f"nofc:{tmp_path}")
    manager = (jvm.org.apache.spark.sql.execution.streaming.checkpointing
               .CheckpointFileManager.create(path, conf))
    assert manager.getClass().getName() == log_store.CHECKPOINT_MANAGER_CLASS
    assert manager.isLocal()
