"""The ``ttl`` command line for people (click): thin over the library."""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import NoReturn

import click

from ttl.errors import TtlError


class _JsonLines(logging.Formatter):
    """One JSON object per log line (``--log-format json``), for log shippers."""

    def format(self, record: logging.LogRecord) -> str:
        import json

        doc = {"ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}Z",
               "level": record.levelname, "logger": record.name,
               "message": record.getMessage()}
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return json.dumps(doc, ensure_ascii=False)


def _logging(verbose: bool, log_format: str = "text") -> None:
    import time as time_mod

    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(_JsonLines())
        handler.formatter.converter = time_mod.gmtime
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    # py4j logs a callback's exception (a micro-batch interrupted by a stop) with its whole
    # trace; the engine reports a batch's failure itself (the query's exception carries
    # the Python trace), so py4j's own copy is noise.
    logging.getLogger("py4j").setLevel(logging.CRITICAL)
    # A sweep still running when its next tick comes is skipped on purpose (max_instances
    # = 1, coalesced): APScheduler warns about it every time.
    logging.getLogger("apscheduler").setLevel(logging.ERROR)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="ttl", prog_name="ttl")
@click.option("-v", "--verbose", is_flag=True, help="Debug logging.")
@click.option("--log-format", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="json: one JSON object per log line (for shippers).")
def main(verbose: bool, log_format: str) -> None:
    """ttl: TTL eviction for keyed state on Delta Lake, with a Kafka changelog."""
    _logging(verbose, log_format)


@main.command()
@click.option("--rebuild-class-archive", is_flag=True,
              help="Build the class-data archive again even if one exists.")
@click.option("--object-store", is_flag=True,
              help="Also the local S3-compatible server (s3proxy) and Hadoop's S3A "
                   "(hadoop-aws with the AWS SDK, ~650 MB), for s3a:// stores.")
@click.option("--conf", "conf_path", type=click.Path(path_type=Path), default=None,
              help="Also the profile's spark.packages, handed to local sessions as jars.")
def setup(rebuild_class_archive: bool, object_store: bool, conf_path: Path | None) -> None:
    """Resolve the JVM jars (Delta, Spark's Kafka connector, the Kafka broker) once, and
    build the local driver's class-data archive (a faster Spark start)."""
    from ttl import archive_build, config
    from ttl.jvm import jars, log_store

    started = time.monotonic()
    for bundle, (count, downloaded) in jars.resolve_all().items():
        state = "downloaded" if downloaded else "already cached"
        click.echo(f"{bundle}: {count} jars {state} in {jars.bundle_dir(bundle)}")
    packages = []
    if object_store:
        count = len(jars.resolve("s3proxy")[0])
        click.echo(f"s3proxy: {count} jars in {jars.bundle_dir('s3proxy')}")
        packages.append([jars.Versions.load().hadoop_aws()])
    profile_packages = config.load(conf_path).spark.packages if conf_path else []
    if profile_packages:
        packages.append(profile_packages)
    for coordinates in packages:
        paths, _ = jars.resolve_packages(coordinates)
        click.echo(f"{', '.join(coordinates)}: {len(paths)} jars in "
                   f"{jars.bundle_dir(jars.packages_bundle(coordinates))}")
    store_jar, state = log_store.build()
    click.echo(f"Delta log store for local paths: {state}"
               + (f" ({store_jar})" if store_jar else ""))
    archive, state = archive_build.build(force=rebuild_class_archive)
    click.echo(f"class-data archive: {state}" + (f" ({archive})" if archive else ""))
    click.echo(f"setup done in {time.monotonic() - started:.1f} s")


@main.command()
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="Keep the broker's data here (default: a temporary directory).")
@click.option("--brokers", type=click.IntRange(1, 9), default=1, show_default=True,
              help="Nodes (3: a KRaft cluster with a static quorum, RF 3, min ISR 2).")
def broker(data_dir: Path | None, brokers: int) -> None:
    """Run the local Kafka broker (or cluster) in the foreground until interrupted."""
    from ttl.local.kafka import LocalKafka
    from ttl.local.process import hold_in_foreground

    kafka = LocalKafka(data_dir, brokers=brokers).start(timeout=90.0 * brokers)
    hold_in_foreground(f"bootstrap.servers={kafka.bootstrap_servers}", kafka.stop, click.echo)


@main.command("spark-cluster")
@click.option("--workers", type=int, default=2, show_default=True,
              help="Worker processes of the standalone cluster.")
@click.option("--cores", type=int, default=1, show_default=True, help="Cores per worker.")
@click.option("--memory", default="2g", show_default=True, help="Memory per worker.")
@click.option("--port", type=int, default=7077, show_default=True, help="The master's port.")
def spark_cluster(workers: int, cores: int, memory: str, port: int) -> None:
    """Run a Spark standalone cluster on 127.0.0.1 in the foreground until interrupted."""
    from ttl.local.process import hold_in_foreground
    from ttl.local.spark_cluster import LocalSparkCluster

    cluster = LocalSparkCluster(workers, cores=cores, memory=memory, port=port).start()
    hold_in_foreground(f"spark.master={cluster.master_url}  web UI "
                       f"http://127.0.0.1:{cluster.ui_port}", cluster.stop, click.echo)


@main.command("object-store")
@click.option("--data-dir", type=click.Path(path_type=Path), default=None,
              help="Where the buckets live (default: a new temporary directory).")
@click.option("--port", type=int, default=9000, show_default=True, help="The S3 port.")
@click.option("--bucket", "buckets", multiple=True, default=["ttl"], show_default=True,
              help="Buckets to create (repeatable).")
def object_store(data_dir: Path | None, port: int, buckets: tuple[str, ...]) -> None:
    """Run the local S3-compatible server (s3proxy) in the foreground until interrupted;
    prints the AWS variables and S3A settings that point clients at it."""
    from ttl.local.object_store import LocalObjectStore
    from ttl.local.process import hold_in_foreground

    server = LocalObjectStore(data_dir, port=port).start()
    for bucket in buckets:
        server.create_bucket(bucket)
    env = " ".join(f"{k}={v}" for k, v in server.environment().items())
    hold_in_foreground(f"S3 at {server.endpoint} (buckets: {', '.join(buckets)}); export "
                       f"{env}", server.stop, click.echo)


# -- the store's jobs: each one call into ttl.app --------------------------------------------

class Duration(click.ParamType):
    """A ``30s``-style duration (``none`` too where a TTL may be absent), checked when the
    command line is parsed: a bad value is a usage error (exit 2) before anything starts."""

    name = "duration"

    def __init__(self, allow_none: bool = False) -> None:
        self.allow_none = allow_none

    def convert(self, value, param, ctx):
        from ttl.config import parse_ttl_ms

        if self.allow_none and str(value).strip().lower() == "none":
            return "none"
        try:
            parse_ttl_ms(value)  # the only durations given on the command line are TTLs
        except ValueError as exc:
            self.fail(str(exc), param, ctx)
        return value


CONF = click.option("--conf", "conf_path", type=click.Path(path_type=Path),
                    default=Path("conf/local.toml"), show_default=True, envvar="TTL_CONF",
                    show_envvar=True, help="The store's configuration profile.")
OUTPUT = click.option("-o", "--output", type=click.Choice(["text", "json"]), default="text",
                      show_default=True, help="json: one JSON object a line (bytes as UTF-8 "
                      "text, or {\"base64\": ...} when they are not UTF-8).")
BOOTSTRAP = click.option("--bootstrap", default=None,
                         help="Override kafka.bootstrap_servers.")


def _app(conf_path: Path, bootstrap: str | None = None, *, one_shot: bool = True):
    """The profile's parts; a one-shot command is interrupted if it loses its lease."""
    from ttl.app import App

    app = App.load(conf_path, bootstrap=bootstrap)
    app.interrupt_on_lease_loss = one_shot
    return app


@main.command("run")
@CONF
@click.option("--available-now", is_flag=True,
              help="Process everything now in the input topic, then exit 0.")
@click.option("--demo", "demo_seconds", type=int, default=None,
              help="Embedded demo: feed sample input, run this many seconds, print a summary.")
def run_cmd(conf_path: Path, available_now: bool, demo_seconds: int | None) -> None:
    """Run the streaming job (Kafka in, store, eviction, changelog out)."""
    from ttl import commands, config

    click.echo(commands.run(config.load(conf_path), available_now=available_now,
                           demo_seconds=demo_seconds))


@main.command("produce-sample")
@CONF
@click.option("--bootstrap", default=None,
              help="Kafka bootstrap servers (default: the profile's kafka.bootstrap_servers).")
@click.option("--keys", default=200, show_default=True, help="Distinct keys to draw from.")
@click.option("--records", default=2000, show_default=True, help="Records to produce.")
@click.option("--rate", default=200.0, show_default=True, help="Records per second.")
def produce_sample(conf_path: Path, bootstrap: str | None, keys: int, records: int,
                   rate: float) -> None:
    """Write sample input (out-of-order and negative timestamps, deletes, headers)."""
    from ttl.local import sample

    app = _app(conf_path, bootstrap)
    if bootstrap is None and app.conf.kafka.bootstrap_servers == "embedded":
        raise click.UsageError("the profile's kafka.bootstrap_servers is 'embedded' (a "
                               "broker of ttl run's own): give --bootstrap HOST:PORT")
    app.check_kafka()
    kafka = app.kafka
    sent = sample.produce(kafka, sample.SampleSpec(keys=keys, records=records, rate=rate))
    click.echo(f"produced {sent} records to {kafka.conf.input_topic}")


@main.command()
@CONF
@click.option("--clock", type=click.Choice(["wall", "stream"]), default="wall",
              show_default=True, help="Sweep by wall-clock time or by stream time.")
@click.option("--now", "now_ms", type=int, default=None, help="Sweep at this clock value (ms).")
@click.option("--dry-run", is_flag=True, help="Count what would be evicted; change nothing.")
@click.option("--ttl", "proposed_ttl", type=Duration(allow_none=True), default=None,
              help="With --dry-run: what would this store TTL evict now?")
def evict(conf_path: Path, clock: str, now_ms: int | None, dry_run: bool,
          proposed_ttl: str | None) -> None:
    """Run one sweep (skips, exit 0, while a stream owns the table)."""
    from ttl import commands

    click.echo(commands.evict(_app(conf_path), clock, now_ms, dry_run, proposed_ttl))


@main.command()
@CONF
@click.option("--ttl", "new_ttl", type=Duration(allow_none=True), required=True,
              help="New store TTL (e.g. 1d) or 'none'.")
@click.option("--dry-run", is_flag=True, help="Say what the new TTL would evict; change nothing.")
def alter(conf_path: Path, new_ttl: str, dry_run: bool) -> None:
    """Change the store TTL: recompute expires_at in one commit (published)."""
    from ttl import commands

    click.echo(commands.alter(_app(conf_path), new_ttl, dry_run))


@main.command()
@CONF
@click.option("--json", "as_json", is_flag=True, help="One JSON object, for machines.")
def status(conf_path: Path, as_json: bool) -> None:
    """Entries, expired-not-swept, stream time, last sweep, changelog lag, dead letters,
    lease (read without Spark: about a second)."""
    from ttl import commands
    from ttl import status as status_mod

    out = commands.status(_app(conf_path))
    click.echo(status_mod.to_json(out) if as_json else "\n".join(status_mod.human(out)))


@main.command()
@CONF
@click.option("--out", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Write index.html (charts and their data) into this directory.")
def report(conf_path: Path, out_dir: Path) -> None:
    """An HTML page of charts: entries by time to expiry, eviction lateness, recent
    commits, drill history (read without Spark)."""
    from ttl import report as report_mod

    app = _app(conf_path)
    if app.kafka_reachable:
        app.check_kafka()
    page = report_mod.write(app.conf, out_dir, kafka=app.kafka if app.kafka_reachable
                            else None)
    click.echo(f"report: {page}")


@main.command()
@CONF
@click.option("--require-stream", is_flag=True,
              help="Unhealthy also when no stream holds the store's lease.")
def health(conf_path: Path, require_stream: bool) -> None:
    """Exit 0 if the store reads and the changelog keeps up (for probes), else exit 1."""
    from ttl import commands

    result = commands.health(_app(conf_path), require_stream)
    click.echo(result.line())
    sys.exit(0 if result.ok else 1)


@main.command("schedule")
@CONF
def schedule_cmd(conf_path: Path) -> None:
    """Run wall-clock sweeps and maintenance on their schedule until SIGTERM."""
    from ttl import commands

    commands.schedule_daemon(_app(conf_path, one_shot=False))


@main.group("config")
def config_group() -> None:
    """Check a profile, or print its JSON Schema (no table, no broker touched)."""


@config_group.command("check")
@CONF
def config_check(conf_path: Path) -> None:
    """Validate a profile: exit 0 and a summary, or one error line naming the setting."""
    from ttl import config, single_writer
    from ttl.config import declared_settings
    from ttl.errors import ConfigError

    conf = config.load(conf_path)
    unsafe = single_writer.problem(conf, declared_settings(conf.spark))
    if unsafe is not None:
        raise ConfigError(f"{conf_path}: {unsafe}")
    click.echo(f"ok: {conf_path}: store {conf.store.name} at {conf.store.path} "
               f"(ttl {conf.store.ttl if conf.store.ttl is not None else 'none'} ms), "
               f"input {conf.kafka.input_topic} -> changelog {conf.kafka.changelog_topic} on "
               f"{conf.kafka.bootstrap_servers}, Spark {conf.spark.master}")


@config_group.command("schema")
def config_schema() -> None:
    """Print the profile's JSON Schema (also conf/profile.schema.json)."""
    import json

    from ttl import config

    click.echo(json.dumps(config.json_schema(), indent=2, sort_keys=True))


@main.group()
def topic() -> None:
    """Create or check the changelog topics."""


@topic.command("create")
@CONF
@BOOTSTRAP
def topic_create(conf_path: Path, bootstrap: str | None) -> None:
    """Create the changelog and progress topics if missing."""
    from ttl import commands

    created = commands.create_topics(_app(conf_path, bootstrap))
    click.echo(f"created: {', '.join(created) or 'nothing (topics exist)'}")


@topic.command("check")
@CONF
@BOOTSTRAP
def topic_check(conf_path: Path, bootstrap: str | None) -> None:
    """Check the changelog topics against the rules (exit 2 naming a broken setting)."""
    from ttl import commands

    state = commands.check_topics(_app(conf_path, bootstrap))
    click.echo(f"{state.name}: ok ({state.partitions} partitions, "
               f"cleanup.policy={state.settings.get('cleanup.policy')})")


@main.command()
@CONF
@OUTPUT
@click.argument("key")
def get(conf_path: Path, output: str, key: str) -> None:
    """Print a key's live value, timestamp and headers (read without Spark); exit 1 when
    the key has no live entry."""
    from ttl import status as status_mod

    found = status_mod.get(_app(conf_path).conf, key.encode())
    if found is None:
        click.echo(f"no live entry for key {key!r}", err=True)
        sys.exit(1)
    click.echo(_entry(key.encode(), found, output))


@main.command()
@CONF
@OUTPUT
@click.option("--limit", default=20, show_default=True, help="Print at most this many.")
def scan(conf_path: Path, output: str, limit: int) -> None:
    """Print live entries in key order (read without Spark)."""
    from ttl import status as status_mod

    for key, entry in status_mod.scan(_app(conf_path).conf, limit):
        click.echo(_entry(key, entry, output))


def _entry(key: bytes, entry: dict, output: str) -> str:
    """One entry for people (text, its time in UTC beside the epoch ms) or machines (JSON)."""
    import json

    from ttl.display import for_json, shown, utc

    if output == "json":
        return json.dumps({"key": for_json(key), "value": for_json(entry["value"]),
                           "ts": entry["ts"],
                           "headers": [[name, for_json(value)] for name, value in
                                       entry["headers"]]}, ensure_ascii=False)
    headers = ", ".join(f"{name}={shown(value)}" for name, value in entry["headers"])
    return (f"{shown(key)}\tvalue={shown(entry['value'])}\tts={entry['ts']} "
            f"({utc(entry['ts'])})" + (f"\theaders={headers}" if headers else ""))


@main.group("dead-letters", invoke_without_command=True)
@CONF
@OUTPUT
@click.pass_context
def dead_letters_cmd(ctx: click.Context, conf_path: Path, output: str) -> None:
    """List the dead letters by reason (read without Spark); `replay` sends some back."""
    ctx.obj = conf_path
    if ctx.invoked_subcommand is None:
        import json

        from ttl import dead_letters
        from ttl.display import for_json

        conf = _app(conf_path).conf
        if output == "text":
            click.echo("\n".join(dead_letters.summary(conf)))
            return
        for row in dead_letters.by_reason(conf):
            click.echo(json.dumps({**row, "latest_keys": [for_json(k) for k in
                                                           row["latest_keys"]]}))


@dead_letters_cmd.command("replay")
@click.option("--conf", "conf_path", type=click.Path(path_type=Path), default=None,
              help="The store's profile (default: the one given to dead-letters).")
@click.option("--reason", required=True, help="Replay the dead letters of this reason.")
@click.option("--key", default=None, help="Only this key's (UTF-8).")
@BOOTSTRAP
@click.pass_context
def dead_letters_replay(ctx: click.Context, conf_path: Path | None, reason: str,
                        key: str | None, bootstrap: str | None) -> None:
    """Produce chosen dead letters to the input topic again (after a fix); idempotent."""
    from ttl import dead_letters

    app = _app(conf_path or ctx.obj, bootstrap)
    app.check_kafka()
    result = dead_letters.replay(app.conf, app.kafka, reason,
                                 key=key.encode() if key is not None else None)
    click.echo(result.line(app.conf.kafka.input_topic))


@main.command("publish")
@CONF
@BOOTSTRAP
@click.option("--reseed", is_flag=True,
              help="Publish the table's current state as a snapshot (when the change data "
                   "of unpublished versions is gone).")
def publish_cmd(conf_path: Path, bootstrap: str | None, reseed: bool) -> None:
    """Publish the changelog up to the table's version (skips while a stream owns it)."""
    from ttl import commands

    click.echo(commands.publish(_app(conf_path, bootstrap), reseed=reseed))


@main.command("restore")
@CONF
@BOOTSTRAP
@click.option("--target", default=None, help="Restore into this path instead of the store.")
@click.option("--until-version", type=int, default=None, help="Stop at this ttl.version.")
@click.option("--until-offsets", default=None, metavar="P:O,...",
              help="Read each changelog partition P up to offset O (exclusive), e.g. 0:120,1:98.")
@click.option("--converter", type=click.Choice(["engine", "plain"]), default="engine",
              help="plain: a foreign changelog as it is (value bytes, record timestamp, "
                   "headers), such as a Kafka Streams store's.")
@click.option("--topic", "source_topic", default=None, help="Read this topic instead.")
def restore_cmd(conf_path: Path, bootstrap: str | None, target: str | None,
                until_version: int | None, until_offsets: str | None, converter: str,
                source_topic: str | None) -> None:
    """Rebuild the table from the changelog (one commit), then sweep and publish."""
    from ttl import commands
    from ttl.changelog.reader import parse_offsets

    click.echo(commands.restore(
        _app(conf_path, bootstrap), target=target, until_version=until_version,
        converter=converter, source_topic=source_topic,
        until_offsets=parse_offsets(until_offsets) if until_offsets else None))


@main.command("drill")
@CONF
@BOOTSTRAP
@click.option("--out", "--report", "report", type=click.Path(path_type=Path), default=None,
              help="Write the JSON report to this file (--report: the older spelling).")
@click.option("--topic", "source_topic", default=None, help="Drill against this topic.")
def drill_cmd(conf_path: Path, bootstrap: str | None, report: Path | None,
              source_topic: str | None) -> None:
    """Restore into scratch and diff with the table; exit 0 only on an exact match."""
    from ttl import commands

    result = commands.drill(_app(conf_path, bootstrap), report, source_topic)
    click.echo(result.summary())
    if not result.match:
        sys.exit(1)


@main.command("upgrade")
@CONF
@click.option("--rollback", is_flag=True, help="Undo a (half-done) in-place upgrade.")
def upgrade_cmd(conf_path: Path, rollback: bool) -> None:
    """Upgrade a v1/v2 table to format v3 in place (resumable), or roll it back."""
    from ttl import commands

    click.echo(commands.upgrade(_app(conf_path), rollback))


@main.command("submit", context_settings={"ignore_unknown_options": True,
                                          "allow_interspersed_args": False})
@CONF
@click.option("--print", "print_only", is_flag=True, help="Print the command; run nothing.")
@click.option("--packages", "packages_flag", is_flag=True,
              help="Maven coordinates (--packages) instead of the local jar bundle.")
@click.option("--deploy-mode", type=click.Choice(["client", "cluster"]), default="client",
              show_default=True, help="spark-submit's deploy mode.")
@click.argument("job", type=click.Path(path_type=Path))
@click.argument("job_args", nargs=-1, type=click.UNPROCESSED)
def submit_cmd(conf_path: Path, print_only: bool, packages_flag: bool, deploy_mode: str,
               job: Path, job_args: tuple[str, ...]) -> None:
    """Run a job (jobs/stream.py, evict.py, drill.py, restore.py) with spark-submit, from the
    profile: master, settings, jars, the ttl package (a zip); arguments after -- go to the job."""
    from ttl.submit import submit

    sys.exit(submit(conf_path, job, list(job_args), print_only=print_only,
                    packages_flag=packages_flag, deploy_mode=deploy_mode))


def run() -> None:
    """Entry point that turns engine errors into one readable line and exit code 2."""
    try:
        main(standalone_mode=True)
    except TtlError as exc:
        click.echo(f"error: {exc.operator_message()}", err=True)
        _exit(2)
    except SystemExit as exc:  # click ends every command with one
        _exit(exc.code)
    except KeyboardInterrupt:
        _exit(130)
    except BaseException:  # noqa: BLE001 - a bug's trace, then the same exit as any other
        traceback.print_exc()
        _exit(1)
    _exit(0)


def _exit(code: object) -> NoReturn:
    """End the process as ``sys.exit(code)`` would, without the interpreter's teardown.

    Arrow's C++ thread pools (pyarrow's and delta-rs's scans) can crash the process while
    the interpreter tears its modules down, after the command has done its work: a
    segmentation fault, ``terminate called without an active exception`` (SIGABRT) or a
    hang, which turn a finished ``ttl evict`` into a failed cron job (a script that left a
    delta-rs scan unfinished did so at exit in 24 of 30 runs here, and in none of 30 with
    this exit). So the exit does what a normal one does first, in its order (threading's
    shutdown: its exit hooks, such as idle thread pools' workers told to stop, and the
    join of non-daemon threads; then the exit handlers: the local broker's stop, PySpark's
    JVM's, logging's flush), then leaves with ``os._exit``.
    """
    if code is None:
        code = 0
    elif not isinstance(code, int):
        click.echo(code, err=True)
        code = 1
    threading._shutdown()  # what the interpreter runs first at exit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`ttl status | head`)
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
