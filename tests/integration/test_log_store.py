"""``ttl.jvm.log_store``: the session lists local Delta logs with ``FileLogStore``, which
returns what Delta's own ``HDFSLogStore`` returns, from any start, on a real table's log."""

from __future__ import annotations

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
