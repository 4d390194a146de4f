"""Benchmark: a batch folded in the driver against one folded on the executors, one run.

    .venv/bin/python -m tests.bench.scaling                     # W1/W2 of 300,000 records
    .venv/bin/python -m tests.bench.scaling --records 1000000
    .venv/bin/python -m tests.bench.scaling --records 900000 --batch 300000 --only executors

Starts a local Kafka broker and a Spark standalone cluster of two one-core workers
(``LocalSparkCluster``), produces ``tests.bench.compare``'s W1 (new keys) and W2 (uniform
updates over them) once each into one input topic, and runs ``ttl run --available-now``
over each in every set-up, one after the other, each on a store of its own
(``max_offsets_per_trigger``: ``--batch``, 100,000):

* **driver-local**: ``local[2]``, the default in local mode (``stream.batch_path = "driver"``);
* **executors**: the standalone cluster, every batch folded and written on the
  executors (``stream.batch_path = "executors"``, ``ttl.store.distributed``), and
  published from there (``changelog.publish_from``'s ``auto`` on a cluster);
* **driver-local-auto**, **executors-auto**: the same as ``driver-local`` and ``executors``
  with ``max_offsets_per_trigger = "auto"`` (``ttl.batch_size``; ``batch_bytes`` 256 MiB
  and, on the cluster, 1 GiB): batches as large as memory allows, against ``--batch``'s;
* **executors-publish-driver**: the same, published from the driver
  (``changelog.publish_from = "driver"``: the change rows collected to it);
* **driver-cluster**: the standalone cluster, batches collected to the driver (what the
  driver path costs where the records live elsewhere);
* **driver-s3**: ``local[2]`` with the store, its checkpoint and every table on the local
  S3-compatible server (``LocalObjectStore``, through Hadoop's S3A and the conditional log
  store; delta-rs with the same settings): what object storage costs against the local
  file system of ``driver-local``.

Prints records/s over the batches, batch p50/p99, and the driver's CPU-seconds per 100k
records: ttl's Python process and its JVM (on the cluster the executors' JVMs and Python
workers are the workers' children, not the driver's), publication included; each
set-up's ratio to the first. All of it shares two cores here, so records/s says what the
extra shuffle and jobs of the executors' path cost, not what executors add; the driver's
CPU per record is what ``docs/scaling.md`` plans a cluster from.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from tests.bench import compare
from tests.bench import stream_bench as sb
from tests.bench.machine import machine_facts
from ttl.config import load
from ttl.jvm.jars import Versions
from ttl.local.kafka import LocalKafka
from ttl.local.object_store import LocalObjectStore
from ttl.local.spark_cluster import LocalSparkCluster
from ttl.names import KEY_FILTER_ENABLED
from ttl.single_writer import S3_CONDITIONAL
from ttl.store.write import POSITIONAL_ENABLED

CLUSTER_SETTINGS = """\
"spark.executor.memory" = "2g"
"spark.executor.cores" = "1"
"spark.driver.memory" = "2g"
"""


#: The driver JVM's JIT at its first tier only (``executors-c1``), against the JVM's default of
#: both: tried for a cluster driver, which plans and schedules while the executors run the
#: records (docs/scaling.md, "The driver's JIT": no gain once the JVM is warm).
C1 = "-XX:TieredStopAtLevel=1"

#: ``max_offsets_per_trigger = "auto"`` (``ttl.batch_size``), for the ``-auto`` set-ups.
AUTO = '"auto"'


def setups(cluster: LocalSparkCluster, s3: LocalObjectStore) -> dict[str, dict]:
    on_cluster = f'{CLUSTER_SETTINGS}[spark]\nmaster = "{cluster.master_url}"\n'
    on_s3 = "".join(f'"{k}" = "{v}"\n' for k, v in {
        **s3.spark_settings(), "spark.delta.logStore.s3a.impl": S3_CONDITIONAL}.items())
    return {
        "driver-local": {"stream_extra": 'batch_path = "driver"',
                         "extra": '[spark]\nmaster = "local[2]"\n'},
        "driver-local-auto": {"stream_extra": 'batch_path = "driver"', "max_offsets": AUTO,
                              "extra": '[spark]\nmaster = "local[2]"\n'},
        "executors": {"stream_extra": 'batch_path = "executors"', "extra": on_cluster},
        "executors-c1": {"stream_extra": 'batch_path = "executors"', "extra": on_cluster.replace(
            CLUSTER_SETTINGS, CLUSTER_SETTINGS + f'"spark.driver.extraJavaOptions" = "{C1}"\n')},
        "executors-auto": {"stream_extra": 'batch_path = "executors"\nbatch_bytes = 1073741824',
                           "max_offsets": AUTO, "extra": on_cluster},
        "executors-delta-write": {  # Delta's replace, not ttl's by the fold's positions
            "stream_extra": 'batch_path = "executors"', "extra": on_cluster.replace(
                CLUSTER_SETTINGS, CLUSTER_SETTINGS + f'"{POSITIONAL_ENABLED}" = "false"\n')},
        "executors-join": {  # the stored rows by a join with the batch's hashes, no filter
            "stream_extra": 'batch_path = "executors"', "extra": on_cluster.replace(
                CLUSTER_SETTINGS, CLUSTER_SETTINGS + f'"{KEY_FILTER_ENABLED}" = "false"\n')},
        "executors-publish-driver": {
            "stream_extra": 'batch_path = "executors"',
            "extra": on_cluster + '[changelog]\npublish_from = "driver"\n'},
        "driver-cluster": {"stream_extra": 'batch_path = "driver"', "extra": on_cluster},
        "driver-s3": {"stream_extra": 'batch_path = "driver"', "s3": True,
                      "extra": on_s3 + '[spark]\nmaster = "local[2]"\n'
                               f'packages = ["{Versions.load().hadoop_aws()}"]\n'},
    }


def driver_cpu(run: compare.Run, key: str = "cpu") -> str:
    """The driver's CPU-seconds per 100k records: ttl's Python and its JVM (its GC and JIT
    compiler threads apart), and their sum; ``cpu_warm``: over the second half of the
    batches only."""
    cpu = run.extra.get(key)
    if cpu is None:
        return "n/a"
    python, jvm = cpu.get("ttl's Python", 0.0), cpu.get("its JVM", 0.0)
    gc, jit = cpu.get("its JVM: GC", 0.0), cpu.get("its JVM: JIT", 0.0)
    return (f"{python + jvm:.2f} (Python {python:.2f}, JVM {jvm:.2f}: GC {gc:.2f}, "
            f"JIT {jit:.2f}, the rest {jvm - gc - jit:.2f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000, help="per workload W1, W2")
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--only", help="a comma list of set-ups to run (default: all)")
    parser.add_argument("--batch", type=int, default=compare.MAX_OFFSETS,
                        help="max_offsets_per_trigger (default 100000)")
    parser.add_argument("--workloads", default="W1,W2", help="W1, W2 or both (default)")
    parser.add_argument("--jfr", type=Path, metavar="DIR",
                        help="record each run's driver JVM (jvm_profile) into DIR")
    args = parser.parse_args()

    machine_facts()
    work = Path(tempfile.mkdtemp(prefix="ttl-scaling-"))
    kafka = LocalKafka(work / "kafka", heap="1g").start()
    (work / "spark").mkdir()
    cluster = LocalSparkCluster(workers=2, cores=1, memory="3g", work_dir=work / "spark").start()
    s3 = LocalObjectStore(work / "s3").start()
    os.environ.update(s3.environment())  # the ttl runs' credentials (the profile: the rest)
    print(f"kafka at {kafka.bootstrap_servers}, spark at {cluster.master_url}; work dir {work}",
          flush=True)
    n = args.records
    try:
        chosen = setups(cluster, s3)
        if args.only:
            chosen = {k: v for k, v in chosen.items() if k in args.only.split(",")}
        confs = {}
        for label, profile in chosen.items():
            on_s3 = profile.pop("s3", False)
            batch = profile.pop("max_offsets", args.batch)
            conf = sb.write_conf(work, kafka, trigger="1s", sweep_interval="10s",
                                 lease="30s", max_offsets=batch, **profile)
            if on_s3:  # the store and checkpoint the profile put in its directory: on S3
                bucket = s3.create_bucket(f"bench{len(confs)}")
                conf.write_text(conf.read_text()
                                .replace(f'"{conf.parent / "store"}"', f'"{bucket}/store"')
                                .replace(f'"{conf.parent / "checkpoint"}"',
                                         f'"{bucket}/checkpoint"'))
            confs[label] = conf
        # One input topic for all: each set-up's own store and checkpoint read it all.
        topic = load(next(iter(confs.values()))).kafka.input_topic
        for conf in confs.values():
            own = load(conf).kafka.input_topic
            conf.write_text(conf.read_text().replace(f'"{own}"', f'"{topic}"'))
        results: dict[str, dict[str, compare.Run]] = {}
        pid = kafka.process.pid if kafka.process else None
        for workload, updates in (("W1", False), ("W2", True)):
            if workload not in args.workloads.split(","):
                continue
            seconds = compare.produce(kafka.bootstrap_servers, topic, n, updates=updates,
                                      seed=args.seed)
            print(f"\n{workload}: produced {n:,} records in {seconds:.1f} s", flush=True)
            for label, conf in confs.items():
                jfr = None
                if args.jfr is not None:
                    args.jfr.mkdir(parents=True, exist_ok=True)
                    jfr = args.jfr.resolve() / f"{workload}-{label}.jfr"
                run = compare.run_ttl(conf, n, f"{workload}-{label}", pid, jfr)
                run.system = label
                results.setdefault(workload, {})[label] = run
                print(run.line(workload), flush=True)
                sb.print_phases(run.extra["batches"])
                print(f"  driver CPU-s per 100k records: {driver_cpu(run)}; over the "
                      f"second half of the batches: {driver_cpu(run, 'cpu_warm')}", flush=True)
        print("\n== summary (one run, this machine) ==")
        for workload, runs in results.items():
            first = next(iter(runs.values()))
            for run in runs.values():
                print(f"{run.line(workload)}\n      driver CPU-s/100k {driver_cpu(run)}, "
                      f"second half {driver_cpu(run, 'cpu_warm')}, "
                      f"rate {compare.ratio(run.rate, first.rate)} of {first.system}")
    finally:
        cluster.stop()
        s3.stop()
        kafka.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
