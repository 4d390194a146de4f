"""The engine on object storage: the local S3-compatible server (``ttl object-store``,
s3proxy) started by the suite, Hadoop's S3A for Spark, delta-rs for the reads, and the
conditional-PUT log store that keeps a second driver's commit out (docs/operations.md,
Object storage). No mocks: real S3 requests over HTTP."""

from __future__ import annotations

import contextlib
import json
import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.e2e.test_stream_job import produce, ttl
from tests.support import clients, consume_all
from ttl.changelog import topic
from ttl.config import REPO_ROOT, load
from ttl.local.object_store import LocalObjectStore
from ttl.record import InputRecord

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def object_store(tmp_path_factory):
    with LocalObjectStore(tmp_path_factory.mktemp("s3")) as server:
        yield server


def test_the_conditional_log_store_lets_exactly_one_driver_write_each_version(object_store):
    """Two log store instances (what two drivers hold) race for each version of a log:
    one wins every round, the other gets the ``FileAlreadyExistsException`` Delta retries
    on, and a later write of a taken version is refused too."""
    root = object_store.create_bucket(f"race{uuid.uuid4().hex[:8]}")
    settings = {**object_store.spark_settings(),
                "spark.delta.logStore.s3a.impl": "ttl.delta.S3ConditionalLogStore"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("log_store_race.py")), root,
         "ttl.delta.S3ConditionalLogStore", json.dumps(settings)],
        capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
        env={**os.environ, **object_store.environment(), "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert all(len(won) == 1 and won[0] in ("a", "b") for won in result["winners"]), result
    assert result["second_write"] == "FileAlreadyExistsException", result


class Relay:
    """A TCP relay in front of an S3 server that records each request's line (method, path
    and query) and, with ``drop_conditions``, removes ``If-None-Match`` from every request:
    an S3-compatible server that ignores conditional writes, as some do (the server behind
    it then checks no signature, since the header is a signed one)."""

    HEADER = re.compile(rb"\r\nif-none-match:[^\r]*", re.IGNORECASE)
    REQUEST_LINE = re.compile(rb"((?:GET|HEAD|PUT|POST|DELETE) /\S*) HTTP/1\.1\r\n")

    def __init__(self, target_port: int, *, drop_conditions: bool = False) -> None:
        self.target = target_port
        self.drop_conditions = drop_conditions
        self.requests: list[str] = []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            threading.Thread(target=self._pump, args=(client, upstream, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, False),
                             daemon=True).start()

    def _pump(self, src, dst, requests: bool) -> None:
        """Copy ``src`` to ``dst``; requests are held until their sender pauses (or 256 KiB
        came) so a header is never cut in two before it is removed."""
        held = b""
        try:
            while True:
                ready, _, _ = select.select([src], [], [], 0.02)
                if ready:
                    chunk = src.recv(65536)
                    if not chunk:
                        break
                    held += chunk
                    if requests and len(held) < 262_144:
                        continue  # until the sender pauses
                if held:
                    dst.sendall(self._requests(held) if requests else held)
                    held = b""
        except OSError:
            pass
        finally:
            if held:
                with contextlib.suppress(OSError):
                    dst.sendall(self._requests(held) if requests else held)
            for sock in (src, dst):  # the other direction's pump then ends too
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
            src.close()

    def _requests(self, data: bytes) -> bytes:
        """Record the request lines in ``data`` (held until its sender paused, so whole
        requests); return it as the server gets it."""
        self.requests += [m.decode() for m in self.REQUEST_LINE.findall(data)]
        return self.HEADER.sub(b"", data) if self.drop_conditions else data

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # ends a pending accept
        self.listener.close()


def test_the_conditional_log_store_refuses_a_server_that_ignores_conditional_writes(
        tmp_path):
    """Behind a server that ignores ``If-None-Match`` every commit would be a blind PUT, the
    second driver's replacing the first's: the store proves the condition holds (a probe
    written twice) before its first commit to a bucket, and refuses to commit, naming the
    bucket and the remedy. Straight to the same server, the same write goes through."""
    with LocalObjectStore(tmp_path / "s3", check_signatures=False) as server:
        relay = Relay(server.port, drop_conditions=True)
        try:
            root = server.create_bucket(f"blind{uuid.uuid4().hex[:8]}")
            outcomes = {}
            for name, endpoint in (("relayed", relay.endpoint), ("direct", server.endpoint)):
                settings = {**server.spark_settings(),
                            "spark.hadoop.fs.s3a.endpoint": endpoint,
                            "spark.delta.logStore.s3a.impl": "ttl.delta.S3ConditionalLogStore"}
                proc = subprocess.run(
                    [sys.executable, str(Path(__file__).with_name("log_store_write.py")),
                     f"{root}/{name}", "ttl.delta.S3ConditionalLogStore", json.dumps(settings)],
                    capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                    env={**os.environ, **server.environment(), "PYTHONPATH": str(REPO_ROOT)})
                assert proc.returncode == 0, proc.stderr[-3000:]
                outcomes[name] = json.loads(proc.stdout.strip().splitlines()[-1])["write"]
        finally:
            relay.close()
    assert "ignores conditional writes" in outcomes["relayed"], outcomes
    assert f"{root}" in outcomes["relayed"] and "S3DynamoDBLogStore" in outcomes["relayed"]
    assert outcomes["direct"] == "written", outcomes
    log = server.buckets / root.removeprefix("s3a://")
    assert not (log / "relayed" / "t" / "_delta_log" / f"{0:020d}.json").exists()
    assert (log / "direct" / "t" / "_delta_log" / f"{0:020d}.json").exists()
    assert not list(log.rglob(".ttl-if-none-match-*")), "a probe was left behind"


def test_the_conditional_log_store_lists_the_log_from_a_key(tmp_path):
    """A snapshot update lists the log from a version on. Delta's S3 store lists the whole
    ``_delta_log`` unless told otherwise (every commit file the log's retention keeps, a
    thousand keys a request, at every update: 18 s at 30,000 commits on the local server);
    ttl's asks S3 for the keys after the one before that version (``start-after``). A log
    of 2,500 commit files, listed from version 2,495: the names from it on, in one LIST
    that starts after the key before it, and no listing of the directory from its start;
    no file of a directory inside the log or beside it (Delta 4.4's own listing from a key
    would give them). A listing of the table's directory (VACUUM's) is its own entries
    only: not its sibling tables' files, nor its log's; and a VACUUM of a table with a
    sibling keeps both tables whole (with Delta 4.4's listing from a key it failed)."""
    with LocalObjectStore(tmp_path / "s3") as server:
        relay = Relay(server.port)
        try:
            root = server.create_bucket("listing")
            bucket = server.buckets / "listing"
            log_dir = bucket / "t" / "_delta_log"
            log_dir.mkdir(parents=True)
            for version in range(2_500):
                (log_dir / f"{version:020d}.json").write_text("{}\n")
            for name in ("t/_delta_log/_sidecars/00000000000000002498.json",
                         "t/_delta_log_x/00000000000000002499.json", "t/part-0.parquet",
                         "t_lease/_delta_log/00000000000000000000.json"):
                (bucket / name).parent.mkdir(parents=True, exist_ok=True)
                (bucket / name).write_text("{}\n")
            settings = {**server.spark_settings(), "spark.hadoop.fs.s3a.endpoint": relay.endpoint,
                        "spark.delta.logStore.s3a.impl": "ttl.delta.S3ConditionalLogStore",
                        "spark.databricks.delta.retentionDurationCheck.enabled": "false"}
            proc = subprocess.run(
                [sys.executable, str(Path(__file__).with_name("log_store_list.py")),
                 "ttl.delta.S3ConditionalLogStore", json.dumps(settings),
                 json.dumps([[f"{root}/t/_delta_log", f"{2_495:020d}"], [f"{root}/t", "\0"]]),
                 f"{root}/vacuumed"],
                capture_output=True, text=True, timeout=300, cwd=REPO_ROOT,
                env={**os.environ, **server.environment(), "PYTHONPATH": str(REPO_ROOT)})
        finally:
            relay.close()
    assert proc.returncode == 0, proc.stderr[-3000:]
    outcome = json.loads(proc.stdout.strip().splitlines()[-1])
    log, table = outcome["listed"]
    assert outcome["after_vacuum"] == {f"{root}/vacuumed": list(range(10, 20)),
                                       f"{root}/vacuumed_lease": list(range(10, 20))}, outcome
    assert log == [f"{v:020d}.json" for v in range(2_495, 2_500)], log
    assert sorted(table) == ["_delta_log", "_delta_log_x", "part-0.parquet"], table
    of_the_log = [r for r in relay.requests if "list-type=2" in r and "_delta_log" in r]
    key_before = urllib.parse.quote(f"t/_delta_log/{2_494:020d}", safe="")
    assert len([r for r in of_the_log if f"start-after={key_before}" in r]) == 1, of_the_log
    # the rest are S3A's probes of a directory itself, which ask for at most two keys
    assert all("start-after" in r or re.search(r"max-keys=[12](&|$)", r)
               for r in of_the_log), of_the_log


def test_the_log_clean_up_runs_on_the_object_store(object_store):
    """The scheduled clean-up of the log on S3 (``tests/e2e/log_cleanup_s3.py``): a
    commit's age is its object's time, so a published version too old for the retention
    refuses it and nothing goes; with everything published the commits before the
    checkpoint go, and the input position and stream time they recorded are still found
    (the table's properties), the table still reads."""
    root = object_store.create_bucket(f"clean{uuid.uuid4().hex[:8]}")
    settings = {**object_store.spark_settings(),
                "spark.delta.logStore.s3a.impl": "ttl.delta.S3ConditionalLogStore"}
    proc = subprocess.run(
        [sys.executable, str(Path(__file__).with_name("log_cleanup_s3.py")), root,
         str(object_store.buckets / root.removeprefix("s3a://")), json.dumps(settings)],
        capture_output=True, text=True, timeout=400, cwd=REPO_ROOT,
        env={**os.environ, **object_store.environment(), "PYTHONPATH": str(REPO_ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    checkpointed = out["checkpointed"]
    assert "skipped: the changelog has the table up to version 1" in out["refused"], out
    assert out["kept_after_refusal"], out
    assert out["gone"] == list(range(checkpointed)), out  # all but the checkpoint's version
    assert out["position"] == {"0": 12, "1": 22} and out["last_batch"] == ["q", 2], out
    assert out["stream_time"] == out["now"] + 2 and out["keys"] == ["k0", "k1", "k2"], out


def test_a_versions_checksum_is_read_on_s3_without_spark(object_store, monkeypatch):
    """What runs without Spark (``ttl status``, ``get``, ``scan``, ``report``, the metrics)
    reads a version's checksum on S3 too, through Arrow's S3 client with the storage
    options delta-rs gets from the profile: it says how many files carry deletion vectors,
    and a delta-rs scan of too many would hang, so such a table is refused on S3 as it is
    on a local disk. Only the keys come from the environment."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    from ttl import delta_rs, status
    from ttl.store import lookup

    for name in [k for k in os.environ if k.startswith("AWS_")]:
        monkeypatch.delenv(name)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.setenv(name, object_store.environment()[name])
    options = delta_rs.storage_options({
        k.removeprefix("spark.hadoop."): v for k, v in object_store.spark_settings().items()
        if k.startswith("spark.hadoop.")})
    root = object_store.create_bucket(f"crc{uuid.uuid4().hex[:8]}")
    path = f"{root}/t"
    write_deltalake(path, pa.table({"x": [1, 2]}), storage_options=options)
    table = DeltaTable(path, storage_options=options)
    assert lookup.checksum(path, table.version(), options=options) == {}  # none written
    assert status.scan_blocked(table, options=options) is None
    written = {"numFiles": 400, "numDeletionVectorsOpt": lookup.DELTA_RS_MAX_DV_FILES,
               "numDeletedRecordsOpt": 1}
    log = object_store.buckets / root.removeprefix("s3a://") / "t" / "_delta_log"
    (log / f"{table.version():020d}.crc").write_text(json.dumps(written))  # as Delta's
    assert lookup.checksum(path, table.version(), options=options) == written
    assert lookup.checksum(path, table.version()) == {}  # neither Spark nor options
    blocked = status.scan_blocked(table, options=options)
    assert f"{lookup.DELTA_RS_MAX_DV_FILES} files carry deletion vectors" in blocked
    assert status.entry_counts(table, 0, options) == {"total": 1, "live": blocked}
    wrong = {**options, "AWS_ACCESS_KEY_ID": object_store.environment()["AWS_ACCESS_KEY_ID"],
             "AWS_SECRET_ACCESS_KEY": "not-the-secret"}  # S3 refuses: unknown, not "none"
    assert lookup.checksum(path, table.version(), options=wrong) is None
    assert "could not be read" in status.scan_blocked(table, options=wrong)


def test_a_stream_runs_on_the_object_store_as_the_documented_profile_says(
        kafka, object_store, tmp_path):
    """``conf/s3-local.toml`` as written (its endpoint moved to the suite's server, its
    broker to the suite's): ``ttl run`` applies a batch and sweeps, every table on S3, the
    changelog gets the puts and the tombstones, a second run's lookups read the stored rows
    with delta-rs and its writes replace them by position, ``ttl get`` / ``ttl status``
    read the store through delta-rs with the profile's S3A settings, and a restore drill
    rebuilds it on S3 from the changelog."""
    name = f"s3e2e{uuid.uuid4().hex[:8]}"
    bucket = object_store.create_bucket(name).removeprefix("s3a://")
    text = (REPO_ROOT / "conf" / "s3-local.toml").read_text()
    text = (text.replace("http://127.0.0.1:9000", object_store.endpoint)
            .replace("s3a://ttl/", f"s3a://{bucket}/")
            .replace('bootstrap_servers = "embedded"',
                     f'bootstrap_servers = "{kafka.bootstrap_servers}"')
            .replace("sessions-s3", name))
    profile = tmp_path / "s3.toml"
    profile.write_text(text)
    conf = load(profile)
    admin = AdminClient({"bootstrap.servers": kafka.bootstrap_servers})
    admin.create_topics([NewTopic(conf.kafka.input_topic, 2, 1)])[
        conf.kafka.input_topic].result()
    topic.create(clients(conf, kafka), conf.changelog)
    now = int(time.time() * 1000)
    later = now + 600_000  # live for ten minutes under the profile's 20 s TTL
    old = now - 60_000  # expired already: dropped on arrival
    produce(kafka, profile, [InputRecord(b"k%d" % i, b"v%d" % i, later, (), i % 2, i // 2)
                             for i in range(6)]
            + [InputRecord(b"gone", b"x", old, (), 0, 3)])
    # Only the credentials come from the environment, as the profile's provider says: the
    # endpoint, region, path style and plain HTTP reach delta-rs from the profile's S3A
    # settings (``ttl.delta_rs``), as they reach Spark.
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update({k: v for k, v in object_store.environment().items()
                if k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                         "AWS_EC2_METADATA_DISABLED")})
    run = ttl("run", "--conf", str(profile), "--available-now", timeout=400, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    assert "upserted=6" in run.stdout and "expired_on_arrival=1" in run.stdout, run.stdout
    produce(kafka, profile, [InputRecord(b"k%d" % i, b"w%d" % i, later + 1, (), i % 2,
                                         10 + i) for i in range(3)])
    run = ttl("run", "--conf", str(profile), "--available-now", timeout=400, env=env)
    assert run.returncode == 0, run.stderr[-4000:]
    batches = [json.loads(line[line.index("{"):]) for line in run.stderr.splitlines()
               if '"lookups"' in line]
    assert batches and all(b["lookups"].get("delta-rs") and "spark" not in b["lookups"]
                           for b in batches if b["records_in"]), batches  # read on S3
    # three stored keys updated: ttl's replace by position, the rows found in the table's
    # files through Arrow's S3 client, the deletion vectors written through S3A
    assert {b["write"] for b in batches if b["records_in"]} == {"positional"}, batches
    got = ttl("get", "k1", "--conf", str(profile), "-o", "json", timeout=120, env=env)
    assert got.returncode == 0 and json.loads(got.stdout)["value"] == "w1", got.stderr[-2000:]
    got = ttl("get", "k3", "--conf", str(profile), "-o", "json", timeout=120, env=env)
    assert got.returncode == 0 and json.loads(got.stdout)["value"] == "v3", got.stderr[-2000:]
    drill = ttl("drill", "--conf", str(profile), timeout=400, env=env)
    assert drill.returncode == 0 and "drill MATCH" in drill.stdout, drill.stderr[-3000:]
    status = ttl("status", "--conf", str(profile), "--json", timeout=120, env=env)
    assert status.returncode == 0, status.stderr[-2000:]
    shown = json.loads(status.stdout)
    assert shown["table"] == f"s3a://{bucket}/sessions" and shown["live_entries"] == 6, shown
    records = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 9, timeout=60)
    assert {m.key() for m in records if m.value() is not None} >= {b"k%d" % i for i in range(6)}
    # a sweep made by ttl's delete by position: the files' expires_at read through Arrow's
    # S3 client, the deletion vectors written through S3A; its tombstones published
    evict = ttl("evict", "--conf", str(profile), "--now", str(later + 60_000), timeout=400,
                env=env)
    assert evict.returncode == 0 and "evicted 6 entries by position" in evict.stdout, (
        evict.stdout + evict.stderr[-3000:])
    records = consume_all(kafka.bootstrap_servers, conf.kafka.changelog_topic, 15, timeout=60)
    assert {m.key() for m in records if m.value() is None} >= {b"k%d" % i for i in range(6)}
    listed = {p.relative_to(object_store.buckets / bucket).parts[0]
              for p in (object_store.buckets / bucket).rglob("*") if p.is_file()}
    assert {"sessions", "checkpoints"} <= listed, listed  # the store and checkpoint on S3
