"""Drills' scratch tables on the store's file system (``drill.scratch``), on a real broker,
real Spark and real Delta tables: each drill writes under the configured root (or beside
the store) and removes its directory afterwards, also when it fails midway."""

from __future__ import annotations

import shutil
import uuid

import pytest
from py4j.protocol import Py4JJavaError

from tests.support import clients, wait_until
from ttl import drill
from ttl.changelog import topic
from ttl.changelog.progress import read_progress
from ttl.changelog.publisher import Publisher
from ttl.clock import FixedClock
from ttl.config import Config, from_dict
from ttl.errors import RestoreError
from ttl.names import progress_topic
from ttl.record import InputRecord
from ttl.store import DeltaStore

pytestmark = pytest.mark.integration

NOW = 1_700_000_000_000


def _conf(tmp_path, kafka, scratch: str | None = None) -> Config:
    name = f"ds-{uuid.uuid4().hex[:8]}"
    conf = from_dict({
        "store": {"name": name, "path": str(tmp_path / "store"), "ttl": "1h"},
        "kafka": {"bootstrap_servers": kafka.bootstrap_servers, "input_topic": f"{name}-in",
                  "changelog_topic": name, "changelog_partitions": 2},
        "drill": {} if scratch is None else {"scratch": scratch},
        "stream": {"checkpoint": str(tmp_path / "ckpt")},
    })
    topic.create(clients(conf, kafka), conf.changelog)
    return conf


def _published_store(spark, kafka, conf: Config) -> None:
    """Two keys put, one deleted, all published and the progress readable."""
    store = DeltaStore(spark, conf.store, wall_clock=FixedClock(NOW))
    store.apply_records([InputRecord(b"k0", b"a", NOW, (), 0, 0),
                         InputRecord(b"k1", b"b", NOW, (), 0, 1)])
    store.apply_records([InputRecord(b"k0", None, NOW + 1, (), 0, 2)])
    publisher = Publisher(spark, conf.store.path, conf.store.name, clients(conf, kafka),
                          conf.changelog)
    published = publisher.publish().published_version
    publisher.close()
    # The transaction's commit markers reach the progress topic after commit returns: a
    # read_committed read just then can still see no progress (seen on a cold broker).
    wait_until(lambda: read_progress(clients(conf, kafka), progress_topic(
        conf.kafka.changelog_topic)).version == published, what="the progress committed")


def _restored_into(caplog) -> list[str]:
    """The targets the restore finished writing during the drill (its state log)."""
    return [r.args[0] for r in caplog.records
            if r.name == "ttl.restore" and r.args and r.args[1:] == ("writing", "done")]


def test_a_drill_restores_under_the_configured_scratch_and_leaves_nothing_there(
        spark, kafka, tmp_path, caplog):
    root = tmp_path / "shared" / "drills"
    conf = _conf(tmp_path, kafka, scratch=str(root))
    _published_store(spark, kafka, conf)
    caplog.set_level("INFO", logger="ttl.restore")
    report = drill.run(spark, conf, clients(conf, kafka), wall_ms=NOW)
    assert report.match and report.keys == 1, report.summary()
    assert report.scratch.startswith(f"{root}/{conf.store.name}-"), report.scratch
    assert _restored_into(caplog) == [report.scratch]         # the table was written there
    assert root.is_dir() and list(root.iterdir()) == []       # and is gone afterwards
    assert not (tmp_path / "store_drill_scratch").exists()    # the default was not used
    history = spark.read.format("delta").load(conf.store.path + "_drills").first()
    assert report.scratch in history.report                    # the record says where


def test_a_drill_that_fails_after_its_restore_still_removes_its_scratch_table(
        spark, kafka, tmp_path, caplog):
    """The store's table is lost after its changes were published: the restore into scratch
    succeeds, reading the store's version to compare with fails."""
    conf = _conf(tmp_path, kafka)                              # the default scratch root
    _published_store(spark, kafka, conf)
    shutil.rmtree(conf.store.path)
    caplog.set_level("INFO", logger="ttl.restore")
    with pytest.raises(Py4JJavaError, match=r"calling o\d+\.load"):     # the store's read
        drill.run(spark, conf, clients(conf, kafka), wall_ms=NOW)
    (scratch,) = _restored_into(caplog)
    root = tmp_path / "store_drill_scratch"
    assert scratch.startswith(f"{root}/{conf.store.name}-"), scratch
    assert root.is_dir() and list(root.iterdir()) == []


def test_a_scratch_root_that_is_a_file_fails_the_drill_naming_the_setting(spark, kafka,
                                                                          tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("an operator's file")
    conf = _conf(tmp_path, kafka, scratch=str(blocker))
    with pytest.raises(RestoreError, match=r"drill\.scratch: .*not-a-directory is a file"):
        drill.run(spark, conf, clients(conf, kafka), wall_ms=NOW)
    assert blocker.read_text() == "an operator's file"
