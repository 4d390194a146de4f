"""Fault injection: kill -9 the stream at random points of a random workload, then check.

    .venv/bin/python -m tests.chaos --runs 20            # any number of runs (own broker)
    .venv/bin/python -m tests.chaos --runs 3 --seed 11   # the same runs again

Each run, on its own store and topics:

1. a random workload (puts with out-of-order timestamps and headers, deletes, null keys for
   the dead letters) over a few hundred keys, produced in three parts;
2. ``ttl run`` (streaming, small micro-batches, wall-clock sweeps every second) is started,
   killed with SIGKILL at a random moment (mid-batch, mid-publication transaction, mid-sweep:
   wherever it happens to be), and restarted, ``--kills`` times, with more input produced
   while it is down; a last ``ttl run --available-now`` finishes the input;
3. the table is compared with the reference model fed the same records (each key's
   records in offset order; the TTL is long, so batch boundaries do not matter), and the
   changelog, replayed, with the table.

It prints one line per run and a total: kills, records, keys lost (in the model, missing
or different in the table), keys resurrected (in the table, not in the model), changelog
mismatches. Exit 1 if any run lost, resurrected or mismatched anything.

Not covered here (each has its own kill test): a restore killed mid-write
(``test_a_killed_restore_leaves_the_target_untouched_or_complete``), the publisher killed
between transactions of one version (``test_changelog``), a broker restart.
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

from tests.e2e.test_stream_job import DAY, TTL_BIN, produce, table_rows, write_conf
from ttl.config import load
from ttl.model import ReferenceStore, Semantics
from ttl.record import InputRecord


@dataclass
class RunResult:
    seed: int
    kills: int
    records: int
    lost: int
    resurrected: int
    changelog_mismatches: int

    @property
    def ok(self) -> bool:
        return not (self.lost or self.resurrected or self.changelog_mismatches)

    def line(self) -> str:
        return (f"run seed={self.seed}: kills={self.kills} records={self.records} "
                f"lost={self.lost} resurrected={self.resurrected} "
                f"changelog_mismatches={self.changelog_mismatches} "
                f"{'OK' if self.ok else 'FAILED'}")


def workload(rng: random.Random, now: int, n: int, keys: int, first_offset: dict[int, int]):
    """``n`` records; partitions and offsets follow the topic's (2 partitions)."""
    records = []
    for _ in range(n):
        partition = rng.randrange(2)
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
            keys: int = 150) -> RunResult:
    """One run on the broker ``kafka`` (a ``LocalKafka``) in the directory ``work``."""
    from tests.support import rebuild_from_changelog

    rng = random.Random(seed)
    conf_path = write_conf(work, kafka, max_offsets=200, lease="4s")
    conf = load(conf_path)
    now = int(time.time() * 1000)
    offsets = {0: 0, 1: 0}
    produced: list[InputRecord] = []
    parts = kills + 1
    for part in range(parts):
        batch = workload(rng, now, records // parts, keys, offsets)
        produce(kafka, conf_path, batch)
        produced += batch
        if part == parts - 1:
            break
        job = subprocess.Popen([TTL_BIN, "run", "--conf", str(conf_path)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:  # the fault's moment is random by design; a job that ends before it failed
            code = job.wait(timeout=rng.uniform(8, 30))
            raise RuntimeError(f"ttl run ended by itself with {code} before the kill "
                               f"(seed {seed})")
        except subprocess.TimeoutExpired:
            job.send_signal(signal.SIGKILL)
            job.wait(timeout=60)
    final = subprocess.run([TTL_BIN, "run", "--conf", str(conf_path), "--available-now"],
                           capture_output=True, text=True, timeout=900)
    if final.returncode != 0:
        raise RuntimeError(f"the last run failed (seed {seed}): {final.stderr[-3000:]}")
    model = ReferenceStore(Semantics(ttl=DAY))
    model.apply_batch(sorted(produced, key=lambda r: (r.partition, r.offset)), now)
    expected = {k: (e.value, e.ts, e.headers) for k, e in model.entries.items()}
    table = table_rows(spark, conf.store.path)
    lost = sum(1 for k, v in expected.items() if table.get(k) != v)
    resurrected = sum(1 for k in table if k not in expected)
    rebuilt = rebuild_from_changelog(changelog(kafka.bootstrap_servers,
                                               conf.kafka.changelog_topic))
    published = {k: v for k, (v, _) in rebuilt.items()}
    mismatches = sum(1 for k in set(published) | set(table)
                     if published.get(k) != (table[k][0] if k in table else None))
    return RunResult(seed, kills, len(produced), lost, resurrected, mismatches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=int(os.environ.get("TTL_CHAOS_SEED", 1)))
    parser.add_argument("--kills", type=int, default=2, help="SIGKILLs per run")
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
    print(f"total: runs={len(results)} kills={sum(r.kills for r in results)} "
          f"records={sum(r.records for r in results)} "
          f"lost={sum(r.lost for r in results)} "
          f"resurrected={sum(r.resurrected for r in results)} "
          f"changelog_mismatches={sum(r.changelog_mismatches for r in results)}", flush=True)
    sys.exit(0 if all(r.ok for r in results) else 1)


if __name__ == "__main__":
    main()
