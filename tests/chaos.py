"""Fault injection: kill -9 the engine's processes at random points of a random workload,
then check.

    .venv/bin/python -m tests.chaos --runs 20            # any number of runs (own broker)
    .venv/bin/python -m tests.chaos --runs 3 --seed 11   # the same runs again

Each run, on its own store and topics:

1. a random workload (puts with out-of-order timestamps and headers, deletes, null keys for
   the dead letters) over a few hundred keys, produced in parts; each part goes to both
   input partitions or to one only (the partitions empty in turns);
2. between parts, one fault, the kinds in turn over the runs (``FAULTS``):
   - ``stream``: ``ttl run`` (streaming, small micro-batches, wall-clock sweeps every
     second) killed with SIGKILL at a random moment (mid-batch, mid-publication
     transaction, mid-sweep: wherever it happens to be);
   - ``broker``: the same, and the broker is killed and restarted under it meanwhile;
   - ``storm``: the same, with an operator's UPDATE (same values, so the expected state
     does not change) committing every 1-3 s: a Delta conflict storm;
   - ``sweep``: the stream drains the input (``--available-now``), then ``ttl evict --now
     T`` (evicting part of the entries) is killed at a random moment and run again;
   - ``drill``: drained, then ``ttl drill`` killed and run again (it must match);
   - ``restore``: drained, then ``ttl restore --target`` killed and run again; the restored
     table must equal the store's;
   - ``lost_dir``: the store's directory is removed under a running ``ttl run``;
   - ``restore_restart``: ``ttl run`` killed -9, the store's directory lost, the checkpoint
     kept (Kubernetes restarts the job as it was);
   - ``clock_ahead``: while ``ttl run`` runs, a second process whose wall clock runs 25 s
     ahead (an injected clock) tries to take the lease for two lease durations; it must
     not get it (``lease_stolen``), then the stream is killed -9;
   after ``lost_dir`` and ``restore_restart`` the harness runs ``ttl run --available-now``
   and takes each action a refusal names (``ttl restore``, moving the checkpoint away),
   as an operator would, until the run succeeds;
   a last ``ttl run --available-now`` finishes the input;
3. the table is compared with the reference model fed the same records (each key's
   records in offset order; the TTL is long, so batch boundaries do not matter) and the
   same sweeps, and the changelog, replayed, with the table.

It prints one line per run and a total: faults by kind, records, keys lost (in the model,
missing or different in the table), keys resurrected (in the table, not in the model),
changelog mismatches, drills and restores that did not match, and stream jobs that died
by themselves (under a broker restart or a conflict storm: reported, not a failure). Exit 1
if any run lost, resurrected or mismatched anything.

Also covered by their own tests: a restore into the store killed mid-write
(``test_a_killed_restore_leaves_the_target_untouched_or_complete``), the publisher killed
between transactions of one version (``test_changelog``).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.test_stream_job import DAY, TTL_BIN, produce, run_here, table_rows, write_conf
from ttl.config import load
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord

FAULTS = ("stream", "sweep", "broker", "drill", "storm", "restore", "lost_dir",
          "restore_restart", "clock_ahead")


@dataclass
class RunResult:
    seed: int
    faults: list[str]
    records: int
    lost: int
    resurrected: int
    changelog_mismatches: int
    copy_mismatches: int = 0  # drills and restores that did not match the table
    died: int = 0  # stream jobs that ended by themselves (broker restart, conflict storm)
    lease_stolen: int = 0  # a clock-ahead contender took the lease of a live stream
    actions: list[str] | None = None  # the operator actions refusals named, taken in turn

    @property
    def kills(self) -> int:
        return len(self.faults)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.resurrected or self.changelog_mismatches
                    or self.copy_mismatches or self.lease_stolen)

    def line(self) -> str:
        return (f"run seed={self.seed}: faults={','.join(self.faults)} records={self.records} "
                f"lost={self.lost} resurrected={self.resurrected} "
                f"changelog_mismatches={self.changelog_mismatches} "
                f"copy_mismatches={self.copy_mismatches} died={self.died} "
                f"lease_stolen={self.lease_stolen} "
                f"actions={','.join(self.actions or []) or '-'} "
                f"{'OK' if self.ok else 'FAILED'}")


def workload(rng: random.Random, now: int, n: int, keys: int, first_offset: dict[int, int],
             partitions: tuple[int, ...] = (0, 1)):
    """``n`` records on ``partitions``; offsets follow the topic's (2 partitions)."""
    records = []
    for _ in range(n):
        partition = rng.choice(partitions)
        k = rng.randrange(keys)
        key = None if rng.random() < 0.01 else b"k%04d-p%d" % (k, partition)
        value = None if rng.random() < 0.1 else b"v%d" % rng.randrange(10**6)
        headers = (("src", b"chaos"),) if rng.random() < 0.3 else ()
        ts = now - rng.randrange(0, 60_000)  # out of order within a minute
        records.append(InputRecord(key, value, ts, headers, partition,
                                   first_offset[partition]))
        first_offset[partition] += 1
    return records


def changelog(bootstrap: str, name: str) -> list:
    """Every committed changelog message, to the end offsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"chaos-{time.time_ns()}",
                         "isolation.level": "read_committed", "enable.auto.commit": False,
                         "enable.partition.eof": True})
    try:
        meta = consumer.list_topics(name, timeout=30).topics[name]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(name, p), timeout=30)[1]
                for p in meta.partitions}
        consumer.assign([TopicPartition(name, p, 0) for p in ends])
        pending = {p for p, end in ends.items() if end > 0}
        messages = []
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error() is not None:
                if msg.error().code() == -191:  # _PARTITION_EOF
                    pending.discard(msg.partition())
                continue
            messages.append(msg)
        assert not pending, f"changelog {name} not read to its end: {pending}"
        return sorted(messages, key=lambda m: (m.partition(), m.offset()))
    finally:
        consumer.close()


def run_one(spark, kafka, work: Path, seed: int, *, kills: int = 2, records: int = 1500,
            keys: int = 150, faults: tuple[str, ...] = FAULTS) -> RunResult:
    """One run on the broker ``kafka`` (a ``LocalKafka``) in the directory ``work``; the
    faults are ``faults`` in turn, starting where the seed says."""
    from tests.support import rebuild_from_changelog

    rng = random.Random(seed)
    conf_path = write_conf(work, kafka, max_offsets=200, lease="4s")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    offsets = {0: 0, 1: 0}
    model = ReferenceStore(Semantics(ttl=DAY))
    pending: list[InputRecord] = []  # produced, not yet given to the model
    result = RunResult(seed, [], 0, 0, 0, 0)
    parts = kills + 1
    for part in range(parts):
        partitions = rng.choice([(0, 1), (0, 1), (0,), (1,)])
        batch = workload(rng, now, records // parts, keys, offsets, partitions)
        produce(kafka, conf_path, batch, flush_timeout=180)  # a restarted broker recovers
        pending += batch
        result.records += len(batch)
        if part == parts - 1:
            break
        fault = faults[(seed * kills + part) % len(faults)]
        result.faults.append(fault)
        if fault in ("stream", "broker", "storm"):
            result.died += _kill_the_stream(spark, kafka, conf, conf_path, rng, fault, seed)
            continue
        if fault == "clock_ahead":
            result.lease_stolen += _contend_with_a_clock_ahead(spark, conf, conf_path, rng)
            continue
        if fault in ("lost_dir", "restore_restart"):
            _lose_the_store(conf, conf_path, rng, fault)
            result.actions = (result.actions or []) + _recover(conf, conf_path, work, part)
            continue
        run_here(conf_path)  # drained: the model is exact here
        model.apply_batch(_in_order(pending), now)
        pending = []
        if fault == "sweep":
            t = now + DAY - rng.randrange(0, 60_000)  # evicts the entries older than that
            _killed_then_done(conf_path, rng, "evict", "--clock", "wall", "--now", str(t))
            model.sweep(t)
        elif fault == "drill":
            code = _killed_then_done(conf_path, rng, "drill", ok=(0, 1))
            result.copy_mismatches += code != 0
        else:
            target = work / f"restored-{part}"
            _killed_then_done(conf_path, rng, "restore", "--target", str(target))
            copy = table_rows(spark, str(target))
            store = table_rows(spark, conf.store.path)
            result.copy_mismatches += sum(1 for k in set(copy) | set(store)
                                          if copy.get(k) != store.get(k))
    run_here(conf_path)  # the drains run in this process: the faults are the other runs'
    model.apply_batch(_in_order(pending), now)
    expected = {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}
    table = table_rows(spark, conf.store.path)
    result.lost = sum(1 for k, v in expected.items() if table.get(k) != v)
    result.resurrected = sum(1 for k in table if k not in expected)
    rebuilt = rebuild_from_changelog(changelog(kafka.bootstrap_servers,
                                               conf.kafka.changelog_topic))
    published = {k: v for k, (v, _) in rebuilt.items()}
    result.changelog_mismatches = sum(
        1 for k in set(published) | set(table)
        if published.get(k) != (table[k][0] if k in table else None))
    return result


def _in_order(records: list[InputRecord]) -> list[InputRecord]:
    return sorted(records, key=lambda r: (r.partition, r.offset))


def _ttl(conf_path: Path, *args: str, ok: tuple[int, ...] = (0,)) -> int:
    """A ``ttl`` command to its end (one that found the lease still held by a killed
    process, and so skipped, runs again until the lease lapsed: within eviction.lease)."""
    from tests.support import wait_until

    def run() -> int | None:
        done = subprocess.run([TTL_BIN, args[0], "--conf", str(conf_path), *args[1:]],
                              capture_output=True, text=True, timeout=900)
        if done.returncode not in ok:
            raise RuntimeError(f"ttl {' '.join(args)} exited {done.returncode}: "
                               f"{done.stderr[-3000:]}")
        skipped = "skipped: the stream owns the table" in done.stdout
        return None if skipped else done.returncode + 1  # truthy: 0 is a result too

    return wait_until(run, timeout=900, interval=1.0,
                      what=f"ttl {' '.join(args)} with the lease free") - 1


def _killed_then_done(conf_path: Path, rng: random.Random, *args: str,
                      ok: tuple[int, ...] = (0,)) -> int:
    """``ttl <args>`` killed -9 at a random moment (if still running), then run to its
    end; returns the completed run's exit code."""
    job = subprocess.Popen([TTL_BIN, args[0], "--conf", str(conf_path), *args[1:]],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        job.wait(timeout=rng.uniform(3, 25))
    except subprocess.TimeoutExpired:
        job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    return _ttl(conf_path, *args, ok=ok)


def _lose_the_store(conf, conf_path: Path, rng: random.Random, fault: str) -> None:
    """``lost_dir``: the store's directory removed under a running stream (which must then
    stop, or be killed, without creating a table there); ``restore_restart``: the stream
    killed -9 at a random moment, then the directory removed (the checkpoint kept)."""
    import shutil

    job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        try:
            job.wait(timeout=rng.uniform(8, 30))
        except subprocess.TimeoutExpired:
            if fault == "restore_restart":
                job.send_signal(signal.SIGKILL)
            shutil.rmtree(conf.store.path, ignore_errors=True)
            try:
                job.wait(timeout=15)  # a batch or sweep meanwhile refuses: it stops
            except subprocess.TimeoutExpired:
                pass  # idle: killed (what Kubernetes restarts is refused then)
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=60)
    shutil.rmtree(conf.store.path, ignore_errors=True)  # a job that ended first: lost now


def _recover(conf, conf_path: Path, work: Path, part: int) -> list[str]:
    """Drain the input with ``ttl run --available-now``, taking each action its refusal
    names (as an operator would) until it succeeds; returns the actions taken."""
    import shutil

    actions: list[str] = []
    for _ in range(6):
        done = subprocess.run([TTL_BIN, "run", "--conf", str(conf_path), "--available-now"],
                              capture_output=True, text=True, timeout=900)
        if done.returncode == 0:
            return actions
        err = done.stderr
        if "move the checkpoint directory away" in err:
            shutil.move(conf.stream.checkpoint, work / f"checkpoint-{part}-{len(actions)}")
            actions.append("move_checkpoint")
        elif "ttl restore" in err:
            _ttl(conf_path, "restore")
            actions.append("restore")
        elif "owned by" in err:  # a killed job's lease: lapses within a lease duration
            actions.append("wait_lease")
        else:
            raise RuntimeError(f"ttl run refused with no action the harness knows: "
                               f"{err[-3000:]}")
    raise RuntimeError(f"ttl run still refused after {actions}")


def _contend_with_a_clock_ahead(spark, conf, conf_path: Path, rng: random.Random) -> int:
    """A running stream; a second process whose wall clock runs 25 s ahead tries to take
    the lease for two lease durations (the stream renews it meanwhile); then the stream is
    killed -9. Returns 1 if the contender took the live stream's lease."""
    from ttl.clock import WallClock
    from ttl.lease import Lease

    class Ahead(WallClock):
        def now_ms(self) -> int:
            return super().now_ms() + 25_000

    job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stolen = 0
    try:
        from tests.support import wait_until

        lease_path = Path(conf.store.path + "_lease")

        def held_by_the_stream() -> bool:
            if job.poll() is not None:
                return True
            if not (lease_path / "_delta_log").exists():
                return False
            state = Lease(spark, conf.store.path).current()
            return state is not None and state.holder.startswith("stream:")

        wait_until(held_by_the_stream, timeout=180, interval=1.0, what="the stream's lease")
        time.sleep(rng.uniform(2, 8))  # the fault's moment is random by design
        # It watches three of the stream's lease durations: a stream on a loaded machine
        # may miss one (then taking it is right), not three renewals in a row.
        watch = 3 * conf.eviction.lease
        contender = Lease(spark, conf.store.path, duration_ms=watch, clock=Ahead(),
                          holder="clock-ahead")
        deadline = time.monotonic() + 2 * watch / 1000
        while time.monotonic() < deadline and job.poll() is None:
            if contender.acquire():
                stolen = 1 if job.poll() is None else 0  # a dead stream's lease may lapse
                contender.release()
                break
            time.sleep(0.5)
    finally:
        if job.poll() is None:
            job.send_signal(signal.SIGKILL)
        job.wait(timeout=60)
    return stolen


def _wait_for_leaders(kafka, conf, timeout: float = 180) -> None:
    """After a broker restart: every partition of the store's topics has a leader again
    (an unclean stop makes the broker recover its logs first)."""
    from confluent_kafka.admin import AdminClient

    from tests.support import wait_until
    from ttl.names import progress_topic

    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    names = (conf.kafka.input_topic, conf.kafka.changelog_topic,
             progress_topic(conf.kafka.changelog_topic))
    def led() -> bool:
        try:
            topics = admin.list_topics(timeout=10).topics
        except Exception:  # noqa: BLE001 - not answering yet
            return False
        return all(n in topics and topics[n].partitions and
                   all(p.leader >= 0 for p in topics[n].partitions.values()) for n in names)

    wait_until(led, timeout=timeout, interval=0.5,
               what=f"leaders for {names} on the restarted broker")


def _kill_the_stream(spark, kafka, conf, conf_path: Path, rng: random.Random, fault: str,
                     seed: int) -> int:
    """``ttl run`` killed -9 at a random moment, with the broker restarted under it or an
    operator's UPDATE committing every 1-3 s meanwhile; returns 1 if the job ended by
    itself first (allowed only under those two faults)."""
    import threading

    stop = threading.Event()
    storm = None
    if fault == "storm":
        pauses = [rng.uniform(1, 3) for _ in range(100)]

        def update_in_a_loop() -> None:
            session = spark.newSession()
            for pause in pauses:
                if stop.wait(pause):
                    return
                try:  # the same values: a conflicting commit that changes no state
                    session.sql(f"UPDATE delta.`{conf.store.path}` SET value = value "
                                "WHERE key < X'6b30303530'")
                except Exception:  # noqa: BLE001 - a conflict or no table yet: next round
                    continue

        storm = threading.Thread(target=update_in_a_loop, daemon=True)
    kill_after = rng.uniform(8, 30)
    restart_after = rng.uniform(3, 12) if fault == "broker" else None
    job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    if storm is not None:
        storm.start()
    try:  # the fault's moment is random by design
        if restart_after is not None:
            try:
                code = job.wait(timeout=restart_after)
                return _ended(code, fault, seed)
            except subprocess.TimeoutExpired:
                pass
            # From this (the main) thread: the broker's JVM dies with the thread that
            # started it (``die_with_parent``).
            kafka.kill_node(1)
            kafka.restart_node(1, timeout=300)  # a loaded machine recovers logs slowly
            _wait_for_leaders(kafka, conf)
        try:
            code = job.wait(timeout=max(1.0, kill_after - (time.monotonic() - started)))
            return _ended(code, fault, seed)
        except subprocess.TimeoutExpired:
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=60)
            return 0
    finally:
        stop.set()
        if storm is not None:
            storm.join(timeout=180)
        if job.poll() is None:
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=60)


def _ended(code: int, fault: str, seed: int) -> int:
    """A stream job that ended by itself before its kill: allowed (and counted) under a
    broker restart or a conflict storm, a harness failure otherwise."""
    if fault == "stream":
        raise RuntimeError(f"ttl run ended by itself with {code} before the kill "
                           f"(seed {seed})")
    return 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TTL_CHAOS_SEED", 1)))
    parser.add_argument("--kills", type=int, default=2, help="faults per run")
    parser.add_argument("--records", type=int, default=1500)
    args = parser.parse_args()

    from ttl.local.kafka import LocalKafka
    from ttl.spark import get_session

    spark = get_session(overrides={"spark.sql.shuffle.partitions": "2"})
    results = []
    with tempfile.TemporaryDirectory(prefix="ttl-chaos-") as tmp, \
            LocalKafka(Path(tmp) / "kafka") as kafka:
        for i in range(args.runs):
            work = Path(tmp) / f"run{i}"
            work.mkdir()
            result = run_one(spark, kafka, work, args.seed + i, kills=args.kills,
                             records=args.records)
            results.append(result)
            print(result.line(), flush=True)
    faults = [f for r in results for f in r.faults]
    print(f"total: runs={len(results)} kills={len(faults)} ("
          + ", ".join(f"{f}={faults.count(f)}" for f in FAULTS)
          + f") records={sum(r.records for r in results)} "
          f"lost={sum(r.lost for r in results)} "
          f"resurrected={sum(r.resurrected for r in results)} "
          f"changelog_mismatches={sum(r.changelog_mismatches for r in results)} "
          f"copy_mismatches={sum(r.copy_mismatches for r in results)} "
          f"died={sum(r.died for r in results)} "
          f"lease_stolen={sum(r.lease_stolen for r in results)}", flush=True)
    sys.exit(0 if all(r.ok for r in results) else 1)


if __name__ == "__main__":
    main()
