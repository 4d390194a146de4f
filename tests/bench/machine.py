"""What every benchmark prints first: the machine and the versions it ran on."""

from __future__ import annotations

import os
import platform
import subprocess
from importlib import metadata as md


def version(dist: str) -> str:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return "?"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def machine_facts(spark=None) -> None:
    """Print the machine, load and versions; with a session, also its Spark settings (a
    benchmark whose Spark runs in a job subprocess passes none)."""
    import confluent_kafka

    java = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    client = confluent_kafka.version()
    print(f"machine: nproc={os.cpu_count()} (sched {len(os.sched_getaffinity(0))}), "
          f"loadavg={load()}, python {platform.python_version()}, {platform.platform()}")
    if spark is None:
        print(f"pyspark {version('pyspark')}, delta-spark {version('delta-spark')}")
    else:
        print(f"spark {spark.version} (pyspark {version('pyspark')}), "
              f"delta-spark {version('delta-spark')}, master {spark.sparkContext.master}, "
              f"shuffle.partitions {spark.conf.get('spark.sql.shuffle.partitions')}, "
              f"driver.memory {spark.conf.get('spark.driver.memory', '?')}")
    print(f"confluent-kafka {client[0] if isinstance(client, tuple) else client}, "
          f"librdkafka {confluent_kafka.libversion()[0]}, "
          f"java: {java.splitlines()[0] if java else '?'}", flush=True)
