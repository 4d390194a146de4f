"""A real Apache Kafka cluster (KRaft, combined broker+controller nodes) on 127.0.0.1.

Started from the Maven Central jars of the ``kafka`` bundle (``ttl setup``), for tests and
the embedded local profile. ``LocalKafka()`` is one node; ``LocalKafka(brokers=3)`` is three
nodes, each its own JVM, with a *static* controller quorum (``controller.quorum.voters``
lists all three; every node's storage is formatted with the same cluster id). No JVM ever
outlives its Python process:

* each JVM is started with ``PR_SET_PDEATHSIG = SIGKILL``, so the kernel kills it when the
  process that started it dies, even by ``kill -9``;
* ``atexit`` stops them cleanly on a normal exit.

Each node writes its log to ``<node dir>/server.log`` (an unread pipe would block the JVM).
Internal topics (offsets, transaction state, share state) run at replication factor = the
node count (1 or 3) and min ISR 1 (one node) or 2 (three nodes): a transactional producer
hangs in ``init_transactions`` if the transaction log cannot reach its replication factor,
and a cluster that must survive one lost node needs acks from two of three.

``sasl_users={"alice": "secret"}`` makes the client listener ``SASL_PLAINTEXT`` with the
``PLAIN`` mechanism and those users. Inter-broker traffic uses the same SASL listener (as
the extra user ``ttl-broker`` with a random password), so there is no unauthenticated data
listener; the controller listener stays ``PLAINTEXT`` on 127.0.0.1 (it only carries KRaft
metadata between the nodes and clients never see it).
"""

from __future__ import annotations

import atexit
import base64
import json
import logging
import os
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ttl.errors import BrokerError, SetupError
from ttl.jvm import jars
from ttl.kafka import JAAS_MODULES, jaas_quote
from ttl.local.process import die_with_parent, free_port

log = logging.getLogger(__name__)

_BROKER_USER = "ttl-broker"

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


@dataclass
class KafkaNode:
    """One KRaft node (broker+controller): its id, directory, ports and JVM."""

    node_id: int
    data_dir: Path
    port: int
    controller_port: int
    process: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.data_dir / "server.log"

    @property
    def formatted(self) -> bool:
        return (self.data_dir / "logs" / "meta.properties").exists()

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def save_ports(self) -> None:
        """Remember the ports: the metadata log records the controller endpoints, so a
        restarted node (and its peers) must reuse them."""
        (self.data_dir / "ports.json").write_text(json.dumps(
            {"broker": self.port, "controller": self.controller_port}))


def _load_node(node_id: int, data_dir: Path) -> KafkaNode:
    """A node with the ports a kept data directory used before, or free ones."""
    saved = data_dir / "ports.json"
    if saved.exists():
        ports = json.loads(saved.read_text())
        return KafkaNode(node_id, data_dir, ports["broker"], ports["controller"])
    return KafkaNode(node_id, data_dir, free_port(), free_port())


class LocalKafka:
    """``with LocalKafka() as kafka: kafka.bootstrap_servers``; ``LocalKafka(brokers=3)`` for
    a three-node cluster, ``sasl_users={...}`` for a SASL/PLAIN client listener."""

    def __init__(self, data_dir: str | Path | None = None, *, heap: str = "512m",
                 brokers: int = 1, sasl_users: dict[str, str] | None = None) -> None:
        if brokers < 1:
            raise ValueError("brokers must be at least 1")
        self._owns_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="ttl-kafka-")).resolve()
        self.heap = heap
        self.sasl_users = dict(sasl_users or {})
        self._broker_password = secrets.token_urlsafe(16)
        # One node keeps the historical layout (everything in data_dir); a cluster puts
        # each node in data_dir/node-<id>.
        dirs = ([self.data_dir] if brokers == 1 else
                [self.data_dir / f"node-{i}" for i in range(1, brokers + 1)])
        self.nodes = [_load_node(i, d) for i, d in enumerate(dirs, start=1)]
        self.startup_seconds: float | None = None
        self._atexit = False

    # -- what clients need ----------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma-separated."""
        return ",".join(node.address for node in self.nodes)

    @property
    def port(self) -> int:
        return self.nodes[0].port

    @property
    def controller_port(self) -> int:
        return self.nodes[0].controller_port

    @property
    def process(self) -> subprocess.Popen | None:
        """The first node's JVM (the only one of a single-node broker)."""
        return self.nodes[0].process

    @property
    def log_file(self) -> Path:
        return self.nodes[0].log_file

    @property
    def security_protocol(self) -> str:
        return "SASL_PLAINTEXT" if self.sasl_users else "PLAINTEXT"

    def client_config(self, user: str | None = None) -> dict[str, str]:
        """librdkafka settings to reach the cluster (as ``user``, default the first one)."""
        conf = {"bootstrap.servers": self.bootstrap_servers}
        if self.sasl_users:
            name = user or next(iter(self.sasl_users))
            conf.update({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": name, "sasl.password": self.sasl_users[name]})
        return conf

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    # -- configuration --------------------------------------------------------------------

    def _quorum(self) -> dict[str, str]:
        """One node: a dynamic quorum bootstrapped with ``--standalone`` (as before).
        Several: a static quorum, every node a voter, so losing one keeps a majority."""
        if len(self.nodes) == 1:
            return {"controller.quorum.bootstrap.servers":
                    f"127.0.0.1:{self.nodes[0].controller_port}"}
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.nodes)
        return {"controller.quorum.voters": voters}

    def _replication(self) -> dict[str, str]:
        """Internal topics replicated to every node (max 3), acks from two when there are
        three: one lost node then blocks neither transactions nor ``acks=all`` writes."""
        rf = min(3, len(self.nodes))
        isr = str(min(2, rf))
        props = {
            "offsets.topic.replication.factor": str(rf),
            "transaction.state.log.replication.factor": str(rf),
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": str(rf),
            "share.coordinator.state.topic.min.isr": isr,
        }
        if rf > 1:
            props.update({"default.replication.factor": str(rf), "min.insync.replicas": isr})
        return props

    def _listeners(self, node: KafkaNode) -> dict[str, str]:
        """The client listener (PLAINTEXT or SASL_PLAINTEXT, also used between brokers)
        and the controller listener."""
        name = self.security_protocol
        props = {
            "listeners": f"{name}://127.0.0.1:{node.port},"
            f"CONTROLLER://127.0.0.1:{node.controller_port}",
            "advertised.listeners": f"{name}://127.0.0.1:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": name,
            "listener.security.protocol.map": f"{name}:{name},CONTROLLER:PLAINTEXT",
        }
        if self.sasl_users:
            users = {**self.sasl_users, _BROKER_USER: self._broker_password}
            entries = " ".join(f"user_{u}={jaas_quote(p)}" for u, p in users.items())
            props.update({
                "sasl.enabled.mechanisms": "PLAIN",
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "listener.name.sasl_plaintext.plain.sasl.jaas.config":
                    f"{JAAS_MODULES['PLAIN']} required username={jaas_quote(_BROKER_USER)} "
                    f"password={jaas_quote(self._broker_password)} {entries};",
            })
        return props

    def _properties(self, node: KafkaNode) -> str:
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            **self._quorum(),
            **self._listeners(node),
            "log.dirs": str(node.data_dir / "logs"),
            "num.partitions": "1",
            "auto.create.topics.enable": "false",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
            **self._replication(),
            "group.initial.rebalance.delay.ms": "0",
            "log.cleaner.backoff.ms": "1000",
            "log.retention.check.interval.ms": "5000",
        }
        # java.util.Properties reads a backslash as an escape: double it.
        return "".join(f"{k}={v.replace(chr(92), chr(92) * 2)}\n" for k, v in props.items())

    # -- processes ------------------------------------------------------------------------

    def _java(self, node: KafkaNode, *args: str, log_to: IO[bytes]) -> subprocess.Popen:
        if shutil.which("java") is None:
            raise SetupError("Java 17+ (`java`) is required for the local Kafka broker.")
        classpath = os.pathsep.join(str(p) for p in jars.jars("kafka"))
        cmd = [
            "java", f"-Xmx{self.heap}", "-Xms128m", "-XX:+UseG1GC",
            f"-Dlog4j2.configurationFile=file:{node.data_dir / 'log4j2.properties'}",
            "-Djava.awt.headless=true", "-cp", classpath, *args,
        ]
        return subprocess.Popen(
            cmd, stdout=log_to, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent, cwd=node.data_dir,
        )

    def _cluster_id(self) -> str:
        """One id for every node (a cluster's nodes refuse peers formatted with another);
        kept in the data directory so nodes formatted later join the same cluster."""
        saved = self.data_dir / "cluster-id"
        if len(self.nodes) > 1 and saved.exists():
            return saved.read_text().strip()
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if len(self.nodes) > 1:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            saved.write_text(cluster_id)
        return cluster_id

    def _format(self, node: KafkaNode, config: Path, cluster_id: str, out: IO[bytes]) -> None:
        """Format a new node's storage. A single node bootstraps its own dynamic quorum
        (``--standalone``); a static quorum takes its voters from the configuration."""
        extra = ["--standalone"] if len(self.nodes) == 1 else []
        # ``--cluster-id=ID`` in one argument: a random id may start with "-", which the
        # tool's argument parser would take for an option (1 start in 32 failed so).
        fmt = self._java(node, "kafka.tools.StorageTool", "format", *extra,
                         f"--cluster-id={cluster_id}", "-c", str(config), log_to=out)
        if fmt.wait(timeout=120) != 0:
            raise BrokerError(f"formatting Kafka storage failed; see {node.log_file}")
        node.save_ports()

    def _launch(self, node: KafkaNode, cluster_id: str | None = None) -> None:
        """Write the node's files, format it if new, start its JVM (without waiting)."""
        node.data_dir.mkdir(parents=True, exist_ok=True)
        (node.data_dir / "log4j2.properties").write_text(_LOG4J2)
        config = node.data_dir / "server.properties"
        config.write_text(self._properties(node))
        config.chmod(0o600)  # SASL passwords live in it
        with node.log_file.open("ab") as out:
            if not node.formatted:
                self._format(node, config, cluster_id or self._cluster_id(), out)
            node.process = self._java(node, "kafka.Kafka", str(config), log_to=out)

    def start(self, timeout: float = 90.0) -> LocalKafka:
        """Start every node together (a static quorum elects no leader until a majority
        runs), then wait until all of them serve as brokers."""
        started = time.monotonic()
        cluster_id = self._cluster_id()
        for node in self.nodes:
            self._launch(node, cluster_id)
        if not self._atexit:
            atexit.register(self.stop)
            self._atexit = True
        try:
            self._wait_ready(started + timeout)
        except BrokerError:
            self._stop_all(10.0)  # keeps the data directory: its logs say why
            raise
        self.startup_seconds = time.monotonic() - started
        log.info("kafka (%d node%s) up at %s in %.1f s (pids %s, logs under %s)",
                 len(self.nodes), "s" if len(self.nodes) > 1 else "", self.bootstrap_servers,
                 self.startup_seconds, [n.process.pid for n in self.nodes if n.process],
                 self.data_dir)
        return self

    def _wait_ready(self, deadline: float, node: KafkaNode | None = None) -> None:
        """Until every node (or ``node``) is a registered, unfenced broker in the metadata
        that ``node`` (or any node) serves."""
        from confluent_kafka.admin import AdminClient

        watched = [node] if node is not None else self.nodes
        conf = {**self.client_config(), "log_level": 0}
        if node is not None:
            conf["bootstrap.servers"] = node.address
        admin = AdminClient(conf)
        wanted = {n.node_id for n in watched}
        while time.monotonic() < deadline:
            for n in watched:
                if n.process is not None and n.process.poll() is not None:
                    raise BrokerError(f"Kafka node {n.node_id} exited with "
                                      f"{n.process.returncode}; see {n.log_file}")
            try:
                if wanted <= set(admin.list_topics(timeout=2).brokers):
                    return
            except Exception:  # noqa: BLE001 - not up yet; KafkaException while it binds
                pass
            time.sleep(0.2)
        raise BrokerError("Kafka did not answer metadata requests in time; see "
                          + ", ".join(str(n.log_file) for n in watched))

    def kill_node(self, node_id: int) -> None:
        """SIGKILL one node's JVM (a crash: no controlled shutdown, no flush) and reap it."""
        node = self.node(node_id)
        if node.process is None:
            return
        node.process.kill()
        node.process.wait()
        node.process = None
        log.info("kafka node %s killed", node_id)

    def restart_node(self, node_id: int, timeout: float = 90.0) -> None:
        """Start a stopped node again on its data directory and ports; wait until it is
        back in the cluster's metadata."""
        node = self.node(node_id)
        if node.alive:
            raise BrokerError(f"Kafka node {node_id} is still running")
        self._launch(node)
        self._wait_ready(time.monotonic() + timeout, node)
        log.info("kafka node %s restarted (pid %s)", node_id, node.process.pid)

    def _stop_node(self, node: KafkaNode, timeout: float) -> None:
        proc, node.process = node.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def _stop_all(self, timeout: float) -> None:
        """SIGTERM every node at once, then reap each. Nodes are signalled together: one at
        a time, each controlled shutdown would wait on peers that are stopping too."""
        for node in self.nodes:
            if node.alive:
                node.process.terminate()
        for node in self.nodes:
            self._stop_node(node, timeout)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every JVM (SIGTERM, then SIGKILL after ``timeout``); idempotent."""
        self._stop_all(timeout)
        if self._owns_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
