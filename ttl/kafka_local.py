"""A real Apache Kafka broker (KRaft, combined broker+controller) on 127.0.0.1.

Started from the Maven Central jars of the ``kafka`` bundle (``ttl setup``), for tests and
the embedded local profile. It never outlives its Python process:

* the JVM is started with ``PR_SET_PDEATHSIG = SIGKILL``, so the kernel kills it when the
  process that started it dies, even by ``kill -9``;
* ``atexit`` stops it cleanly on a normal exit.

The broker writes its log to ``<data_dir>/server.log`` (an unread pipe would block the JVM).
A single node runs its internal topics (offsets, transaction state, share state) at
replication factor 1 and min ISR 1, or transactional producers hang in ``init_transactions``.
"""

from __future__ import annotations

import atexit
import base64
import ctypes
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from ttl import jars
from ttl.errors import BrokerError, SetupError

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1

_LOG4J2 = """\
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = INFO
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _die_with_parent() -> None:
    """Runs in the child before exec: ask the kernel to SIGKILL it when the parent dies."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class LocalKafka:
    """One KRaft node; ``with LocalKafka() as kafka: kafka.bootstrap_servers``."""

    def __init__(self, data_dir: str | Path | None = None, *, heap: str = "512m") -> None:
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="ttl-kafka-")).resolve()
        self.heap = heap
        self.port, self.controller_port = self._ports()
        self.process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    def _ports(self) -> tuple[int, int]:
        """Free ports, or the ones a kept data directory used before (its metadata log
        records the controller's endpoint, so a restarted broker must reuse them)."""
        saved = self.data_dir / "ports.json"
        if saved.exists():
            ports = json.loads(saved.read_text())
            return ports["broker"], ports["controller"]
        return free_port(), free_port()

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    def _properties(self) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.bootstrap.servers": f"127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},"
            f"CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
            "log.retention.check.interval.ms": "5000",
        }
        return "".join(f"{k}={v}\n" for k, v in props.items())

    def _java(self, *args: str, log_to) -> subprocess.Popen:
        if shutil.which("java") is None:
            raise SetupError("Java 17+ (`java`) is required for the local Kafka broker.")
        classpath = os.pathsep.join(str(p) for p in jars.jars("kafka"))
        cmd = [
            "java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile=file:{self.data_dir / 'log4j2.properties'}",
            "-Djava.awt.headless=true", "-cp", classpath, *args,
        ]
        return subprocess.Popen(
            cmd, stdout=log_to, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=_die_with_parent, cwd=self.data_dir,
        )

    def start(self, timeout: float = 90.0) -> LocalKafka:
        started = time.monotonic()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2)
        config = self.data_dir / "server.properties"
        config.write_text(self._properties())
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        with self.log_file.open("ab") as out:
            if not (self.data_dir / "logs" / "meta.properties").exists():
                fmt = self._java("kafka.tools.StorageTool", "format", "--standalone",
                                 "-t", cluster_id, "-c", str(config), log_to=out)
                if fmt.wait(timeout=120) != 0:
                    raise BrokerError(f"formatting Kafka storage failed; see {self.log_file}")
                (self.data_dir / "ports.json").write_text(json.dumps(
                    {"broker": self.port, "controller": self.controller_port}))
            self.process = self._java("kafka.Kafka", str(config), log_to=out)
        atexit.register(self.stop)
        self._wait_ready(started + timeout)
        self.startup_seconds = time.monotonic() - started
        log.info("kafka broker up at %s in %.1f s (pid %s, log %s)", self.bootstrap_servers,
                 self.startup_seconds, self.process.pid, self.log_file)
        return self

    def _wait_ready(self, deadline: float) -> None:
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                code = self.process.returncode
                raise BrokerError(f"Kafka exited with {code}; see {self.log_file}")
            try:
                metadata = admin.list_topics(timeout=2)
                if metadata.brokers:
                    return
            except Exception:  # noqa: BLE001 - not up yet; KafkaException while it binds
                pass
            time.sleep(0.2)
        self.stop()
        raise BrokerError(f"Kafka did not answer metadata requests in time; see {self.log_file}")

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the JVM (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
