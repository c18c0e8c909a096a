"""Kafka brokers on loopback: KRaft, every node both broker and controller (combined mode).

One node for the single-node workloads, three (a three-voter controller quorum) for the
replicated one. Each node gets its own directory with ``server.properties``, a log4j2
configuration (warnings only, to ``kafka.log``) and its log, formatted with Kafka's
``StorageTool`` before the first start. The JVM options are those of Kafka's own start scripts
(``kafka-server-start.sh``: 1 GiB heap, G1 with 20 ms pause target).

``durable`` sets ``log.flush.interval.messages=1``: the broker then flushes each partition
after every appended batch, before the produce request is answered, as Hedwig fsyncs before
it acknowledges. Without it (Kafka's default) the broker leaves flushing to the OS.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster.zookeeper import free_port

JVM_OPTS = [
    "-Xmx1G",
    "-Xms1G",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
]

_LOG4J = """status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.started.name = kafka.server.KafkaRaftServer
logger.started.level = info
"""


@dataclass
class KafkaNode:
    node_id: int
    directory: Path
    port: int = field(default_factory=free_port)
    controller_port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / "kafka.log"

    def properties(self, voters: str, nodes: int, durable: bool) -> str:
        internal = min(nodes, 3)
        lines = [
            "process.roles=broker,controller",
            f"node.id={self.node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners=PLAINTEXT://{self.address},CONTROLLER://127.0.0.1:{self.controller_port}",
            f"advertised.listeners=PLAINTEXT://{self.address}",
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            f"log.dirs={self.directory / 'data'}",
            "num.partitions=1",
            f"offsets.topic.replication.factor={internal}",
            f"transaction.state.log.replication.factor={internal}",
            f"transaction.state.log.min.isr={min(internal, 2)}",
            f"share.coordinator.state.topic.replication.factor={internal}",
            f"share.coordinator.state.topic.min.isr={min(internal, 2)}",
            "group.initial.rebalance.delay.ms=0",
        ]
        if durable:
            lines.append("log.flush.interval.messages=1")
        return "\n".join(lines) + "\n"


@dataclass
class KafkaCluster:
    """``nodes`` Kafka processes; a context manager that stops them and removes their data."""

    classpath: str
    base_dir: Path
    nodes: int = 1
    durable: bool = True
    members: list[KafkaNode] = field(default_factory=list, init=False)

    @property
    def bootstrap(self) -> list[str]:
        return [n.address for n in self.members]

    @property
    def pids(self) -> list[int]:
        return [n.proc.pid for n in self.members if n.proc is not None]

    def _java(self, main: str, *args: str) -> list[str]:
        return ["java", *JVM_OPTS, main, *args]

    def start(self, timeout: float = 90.0) -> KafkaCluster:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.members = [
            KafkaNode(i + 1, self.base_dir / f"kafka{i + 1}") for i in range(self.nodes)
        ]
        voters = ",".join(f"{n.node_id}@127.0.0.1:{n.controller_port}" for n in self.members)
        env = {**os.environ, "CLASSPATH": self.classpath}
        for n in self.members:
            n.directory.mkdir(parents=True, exist_ok=True)
            props = n.directory / "server.properties"
            props.write_text(n.properties(voters, self.nodes, self.durable))
            log4j = n.directory / "log4j2.properties"
            log4j.write_text(_LOG4J.format(log=n.log_path))
            subprocess.run(
                [
                    "java",
                    "kafka.tools.StorageTool",
                    "format",
                    f"--cluster-id={cluster_id}",
                    "-c",
                    str(props),
                ],
                check=True,
                env=env,
                stdout=subprocess.DEVNULL,
            )
        for n in self.members:
            with open(n.directory / "stdout.log", "ab") as out:
                n.proc = subprocess.Popen(
                    [
                        "java",
                        *JVM_OPTS,
                        f"-Dlog4j2.configurationFile={n.directory / 'log4j2.properties'}",
                        "kafka.Kafka",
                        str(n.directory / "server.properties"),
                    ],
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
        deadline = time.monotonic() + timeout
        for n in self.members:
            while "Kafka Server started" not in _read(n.log_path):
                if n.proc is None or n.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"Kafka node {n.node_id} exited; see {n.directory}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"Kafka node {n.node_id} not started in {timeout}s")
                time.sleep(0.1)
        return self

    def stop(self) -> None:
        """Stop every node: a controlled shutdown, cut short after 10 s (a broker of 10,000
        partitions takes longer, and its data is thrown away)."""
        for n in self.members:
            if n.proc is not None and n.proc.poll() is None:
                n.proc.terminate()
        for n in self.members:
            if n.proc is not None:
                try:
                    n.proc.wait(10)
                except subprocess.TimeoutExpired:
                    n.proc.kill()
                    n.proc.wait()
                n.proc = None

    def __enter__(self) -> KafkaCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
