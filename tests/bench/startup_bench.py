"""Benchmark: how long ``ttl run --available-now`` takes for one record (prints figures).

    .venv/bin/python -m tests.bench.startup_bench                  # 2 rounds
    .venv/bin/python -m tests.bench.startup_bench --rounds 3 --other /work/before

Starts a local Kafka broker, then per round and per variant: a fresh store and topics (the
e2e tests' ``write_conf``), one record produced, ``ttl run --available-now`` (the first run:
it creates the table, checkpoint and lease), one more record, ``ttl run --available-now``
again (the catch-up). Prints both wall times and the split of the "stream started in" line.

Variants, alternated within each round: this checkout with its class-data archive (the
default session), this checkout without it (``TTL_CACHE`` pointing at a cache that holds the
jars only), and with ``--other DIR`` another checkout (``PYTHONPATH=DIR``, without the
archive, as an older checkout never had one).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.e2e.test_stream_job import produce, write_conf
from ttl.jvm import jars
from ttl.local.kafka import LocalKafka
from ttl.record import InputRecord

REPO = Path(__file__).resolve().parents[2]


def _run(conf: Path, env: dict[str, str]) -> tuple[float, str]:
    """One ``ttl run --available-now``: wall seconds and its "started in" split."""
    cmd = [sys.executable, "-c", "import sys; from ttl.cli import run; sys.argv[0] = 'ttl'; run()",
           "run", "--conf", str(conf), "--available-now"]
    began = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env},
                          cwd=tempfile.gettempdir(), timeout=600)
    took = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"ttl run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    started = re.search(r"started in ([^;]*);", proc.stderr)
    return took, started.group(1) if started else "(no split: an older checkout)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--other", type=Path, default=None,
                        help="another checkout to compare (run with PYTHONPATH=DIR)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ttl-startup-") as work:
        jars_only = Path(work) / "cache"
        jars_only.mkdir()
        (jars_only / "jars").symlink_to(jars.cache_root() / "jars")
        variants = [("this checkout, class-data archive", {"PYTHONPATH": str(REPO)}),
                    ("this checkout, no archive", {"PYTHONPATH": str(REPO),
                                                   "TTL_CACHE": str(jars_only)})]
        if args.other is not None:
            variants.append((f"{args.other}, no archive", {"PYTHONPATH": str(args.other),
                                                           "TTL_CACHE": str(jars_only)}))
        with LocalKafka(Path(work) / "kafka") as broker:
            for round_ in range(1, args.rounds + 1):
                for name, env in variants:
                    store = Path(tempfile.mkdtemp(dir=work))
                    conf = write_conf(store, broker)
                    now = int(time.time() * 1000)
                    produce(broker, conf, [InputRecord(key=b"a", value=b"1", timestamp=now,
                                                       partition=0)])
                    first, _ = _run(conf, env)
                    produce(broker, conf, [InputRecord(key=b"b", value=b"2", timestamp=now,
                                                       partition=0)])
                    again, split = _run(conf, env)
                    print(f"round {round_}, {name}: first run {first:.1f} s, catch-up of one "
                          f"record {again:.1f} s; started in {split}", flush=True)


if __name__ == "__main__":
    main()
