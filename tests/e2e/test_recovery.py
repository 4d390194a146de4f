"""Recovery as an operator does it (``ttl`` in a subprocess, the real broker): a lost store
directory, a restore followed by the old checkpoint. Each wrong step is refused, naming
its action and changing nothing; the named action ends with the table and the changelog
equal to the reference model."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.e2e.test_stream_job import _consume_everything, produce, table_rows, ttl, write_conf
from tests.support import clients, rebuild_from_changelog
from ttl import commands, delta_log
from ttl.app import App
from ttl.config import load
from ttl.errors import StoreMissing
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord

pytestmark = pytest.mark.e2e

DAY = 86_400_000


def records(now: int, first: int, count: int, keys: int = 1_000) -> list[InputRecord]:
    return [InputRecord(f"k{(first + i) % keys}".encode(), f"v{first + i}".encode(), now + i,
                        (), i % 2, first + i) for i in range(count)]


def model_of(*batches: list[InputRecord], now: int) -> dict[bytes, tuple]:
    model = ReferenceStore(Semantics(ttl=DAY))
    for batch in batches:
        model.apply_batch(sorted(batch, key=lambda r: (r.partition, r.offset)), now)
    return {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}


def test_a_lost_store_directory_is_refused_by_every_command_until_restored(
        spark, kafka, tmp_path):
    """The store's directory is removed between two runs, the checkpoint kept. Before, the
    second run created an empty table whose versions stayed below the changelog's progress,
    so nothing of it was published again. Now neither the run nor a sweep creates a table;
    both name `ttl restore`, which rebuilds the store, and the next run loses nothing. (In
    this process, for speed: the command line's one-line errors are test_command_line's.)"""
    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    first = records(now, 0, 60)
    produce(kafka, conf_path, first)
    commands.run(conf, available_now=True)
    shutil.rmtree(conf.store.path)                                  # the loss
    later = records(now, 100, 5, keys=5)
    produce(kafka, conf_path, later)
    with pytest.raises(StoreMissing, match="holds versions up to .*ttl restore"):
        commands.run(conf, available_now=True)
    with pytest.raises(StoreMissing, match="no store table"):
        commands.evict(App(conf, spark=spark), "wall", None, dry_run=True)
    assert not Path(conf.store.path).exists()                       # nothing created
    commands.restore(App(conf, spark=spark))
    commands.run(conf, available_now=True)
    expected = model_of(first, later, now=now)
    assert table_rows(spark, conf.store.path) == expected           # nothing lost
    rebuilt = rebuild_from_changelog(_consume_everything(kafka, conf.kafka.changelog_topic))
    assert {k: v[0] for k, v in rebuilt.items()} == {k: v[0] for k, v in expected.items()}


def test_a_checkpoint_from_before_a_restore_is_refused_not_resumed_past_the_table(
        spark, kafka, tmp_path):
    """30 records, then 20 more, each through a run; the table is lost and restored from
    the changelog at the first run's version into a new path, the profile pointed there and
    re-seeded as the run asks. Before, the run on the old checkpoint resumed after all 50
    records and the 20 later keys never reached the table. Now it is refused naming the
    checkpoint; with it moved away the run re-applies the input and loses nothing."""
    from ttl.changelog.progress import read_progress
    from ttl.errors import CheckpointAhead, ReseedRequired
    from ttl.names import progress_topic

    conf_path = write_conf(tmp_path, kafka)
    conf = load(conf_path)
    now = int(time.time() * 1000)
    first, later = records(now, 0, 30), records(now, 30, 20)
    produce(kafka, conf_path, first)
    commands.run(conf, available_now=True)
    point = read_progress(clients(conf, kafka), progress_topic(conf.kafka.changelog_topic))
    produce(kafka, conf_path, later)
    commands.run(conf, available_now=True)
    shutil.rmtree(conf.store.path)                                  # the loss
    new = str(tmp_path / "restored")
    commands.restore(App(conf, spark=spark), target=new, until_version=point.version)
    conf_path.write_text(conf_path.read_text().replace(f'path = "{conf.store.path}"',
                                                       f'path = "{new}"'))
    conf = load(conf_path)                                          # pointed at NEW
    with pytest.raises(ReseedRequired):
        commands.run(conf, available_now=True)
    commands.publish(App(conf, spark=spark), reseed=True)
    version = delta_log.latest_version(spark, new)
    with pytest.raises(CheckpointAhead, match="records no input position"):
        commands.run(conf, available_now=True)
    assert delta_log.latest_version(spark, new) == version          # nothing written
    shutil.move(conf.stream.checkpoint, tmp_path / "old-checkpoint")  # the named action
    commands.run(conf, available_now=True)
    expected = model_of(first, later, now=now)
    assert table_rows(spark, new) == expected                       # the 20 keys arrived
    rebuilt = rebuild_from_changelog(_consume_everything(kafka, conf.kafka.changelog_topic))
    assert {k: v[0] for k, v in rebuilt.items()} == {k: v[0] for k, v in expected.items()}


def test_a_stream_stopped_past_its_lease_cannot_commit_after_another_process_took_it(
        spark, kafka, tmp_path):
    """The stream's whole process group is frozen (SIGSTOP) past its lease; `ttl evict`
    watches the lease row unchanged for a lease duration, takes it (fencing the store
    table), sweeps and gives it back; the stream is resumed (SIGCONT) with new input
    waiting. Its next commit is refused (the fence is not its own, or its heartbeat finds
    the lease lost first): it writes nothing and stops naming the lease; its input stays
    for the next run (the chaos harness checks such runs against the model). (The fence
    alone, deterministically, with injected clocks: test_eviction's takeover test.)"""
    import os
    import signal
    import subprocess

    from tests.e2e.test_stream_job import TTL_BIN
    from tests.support import wait_until
    from ttl.names import OP_BATCH, PROP_LEASE_FENCE

    # Stream-time sweeps only: no wall sweep of the stream's scheduler publishes (and so
    # meets the fenced producer) before the batch tries its commit.
    conf_path = write_conf(tmp_path, kafka, lease="5s", clock="stream")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    first, later = records(now, 0, 20), records(now, 20, 10)
    produce(kafka, conf_path, first)
    log_path = tmp_path / "stream.stderr"
    with log_path.open("w") as log_file:
        stream = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                                  stdout=subprocess.DEVNULL, stderr=log_file,
                                  start_new_session=True)
    try:
        wait_until(lambda: stream.poll() is not None or '"records_in": 20' in
                   log_path.read_text(), timeout=240, what="the stream's first batch")
        assert stream.poll() is None, log_path.read_text()[-4000:]
        os.killpg(stream.pid, signal.SIGSTOP)                       # frozen, lease and all
        swept = ttl("evict", "--conf", str(conf_path))
        assert swept.returncode == 0 and "skipped" not in swept.stdout, \
            (swept.stdout, swept.stderr[-4000:])
        fence = delta_log.properties(spark, conf.store.path).get(PROP_LEASE_FENCE)
        assert fence is not None                                    # the takeover fenced it
        fenced_at = delta_log.latest_version(spark, conf.store.path)
        produce(kafka, conf_path, later)
        os.killpg(stream.pid, signal.SIGCONT)
        stream.wait(timeout=240)
    finally:
        if stream.poll() is None:
            os.killpg(stream.pid, signal.SIGCONT)
            os.killpg(stream.pid, signal.SIGTERM)
            stream.wait(timeout=120)
    text = log_path.read_text()
    # Refused by the fence, or stopped first by its heartbeat's renewal, which finds the
    # row taken or changed (whichever thread comes first after SIGCONT): never committed.
    assert stream.returncode != 0 and ("refusing to commit" in text
                                       or "lost to another writer" in text), text[-4000:]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{conf.store.path}`").collect()
    late = [r.version for r in history if r.version > fenced_at and r.userMetadata
            and f'"op":"{OP_BATCH}"' in r.userMetadata]
    assert late == [], late                                         # nothing after the fence
    assert set(table_rows(spark, conf.store.path)) == set(model_of(first, now=now))
