"""The ``ttl`` command line for people (click): thin over the library."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import click

from ttl.errors import TtlError


def _logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)


@click.group()
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
def main(verbose: bool) -> None:
    """ttl: TTL eviction for keyed state on Delta Lake, with a Kafka changelog."""
    _logging(verbose)


@main.command()
def setup() -> None:
    """Resolve the JVM jars (Delta, Spark's Kafka connector, the Kafka broker) once."""
    from ttl import jars

    started = time.monotonic()
    for bundle, (count, downloaded) in jars.resolve_all().items():
        state = "downloaded" if downloaded else "already cached"
        click.echo(f"{bundle}: {count} jars {state} in {jars.bundle_dir(bundle)}")
    click.echo(f"setup done in {time.monotonic() - started:.1f} s")


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=Path("data"),
              show_default=True)
@click.option("-n", "--records", default=20, show_default=True)
def demo(data_dir: Path, records: int) -> None:
    """Smoke run: local broker -> Spark Kafka source -> MERGE into Delta, then a summary."""
    from ttl import demo as demo_run

    summary = demo_run.run(data_dir, records)
    click.echo("demo summary: " + ", ".join(f"{k}={v}" for k, v in summary.items()))


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=None)
def broker(data_dir: Path | None) -> None:
    """Run the local Kafka broker in the foreground until interrupted."""
    import signal

    from ttl.kafka_local import LocalKafka

    kafka = LocalKafka(data_dir).start()
    click.echo(f"bootstrap.servers={kafka.bootstrap_servers}  (Ctrl-C stops)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        kafka.stop()


def run() -> None:
    """Entry point that turns engine errors into one readable line and exit code 2."""
    try:
        main(standalone_mode=True)
    except TtlError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    run()
