"""The lines of the table: each a system in one configuration, started on loopback.

- ``hedwig``: ZooKeeper and hub processes (``DevCluster``), fsync before every acknowledgement
  (group commit), 1/1/1 on one hub and 3/3/2 on three.
- ``kafka-durable``: Kafka with the same durability: ``log.flush.interval.messages=1`` on the
  brokers; the producer with ``acks=all`` and ``enable.idempotence=true``.
- ``kafka-default``: Kafka as shipped, the reference line: no flush (the OS writes pages back
  when it likes), the producer with librdkafka's defaults (``acks=all``, no idempotence,
  ``linger.ms=5``).
- ``kafka-4.1.1-durable``: the durable line on the previous peer, Kafka 4.1.1, run only when
  asked for (``--previous``), so a table can show what the change of peer changed.

Both Kafka lines run the newest Kafka Maven Central serves (``fetch.KAFKA_VERSION``).

Every system's data directory is a fresh temporary directory on the same file system.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from bench.peers.fetch import KAFKA_VERSION, PREVIOUS_KAFKA_VERSION
from bench.peers.kafka_server import KafkaCluster
from hedwig.devcluster.cluster import DevCluster

DURABLE_PRODUCER = {"acks": "all", "enable.idempotence": True}


@dataclass(frozen=True)
class Line:
    key: str
    label: str
    system: str
    durable: bool = True
    producer_config: dict[str, Any] = field(default_factory=dict)
    # The Kafka version it runs (a Hedwig line runs the tree it is in).
    version: str = ""


LINES: list[Line] = [
    Line("hedwig", "Hedwig (fsync before ack)", "hedwig"),
    Line(
        "kafka-durable",
        f"Kafka {KAFKA_VERSION}, flush per append, acks=all, idempotent",
        "kafka",
        durable=True,
        producer_config=DURABLE_PRODUCER,
        version=KAFKA_VERSION,
    ),
    Line(
        "kafka-default",
        f"Kafka {KAFKA_VERSION} default (no flush)",
        "kafka",
        durable=False,
        version=KAFKA_VERSION,
    ),
    Line(
        "kafka-4.1.1-durable",
        f"Kafka {PREVIOUS_KAFKA_VERSION}, flush per append, acks=all, idempotent",
        "kafka",
        durable=True,
        producer_config=DURABLE_PRODUCER,
        version=PREVIOUS_KAFKA_VERSION,
    ),
]
# What ``make bench-peers`` runs unless told otherwise; ``--previous`` adds the 4.1.1 line.
DEFAULT_LINES = ["hedwig", "kafka-durable", "kafka-default"]
PREVIOUS_LINE = "kafka-4.1.1-durable"


def lines_by_key(keys: list[str] | None) -> list[Line]:
    if not keys:
        keys = DEFAULT_LINES
    known = {line.key: line for line in LINES}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise SystemExit(f"unknown systems {unknown}; known: {sorted(known)}")
    return [known[k] for k in keys]


class Running(Protocol):
    """A started system: where clients connect, which processes serve, and how to stop."""

    @property
    def bootstrap(self) -> list[str]: ...

    @property
    def server_pids(self) -> list[int]: ...

    @property
    def memory_pids(self) -> list[int]: ...

    def stop(self) -> None: ...


class RunningHedwig:
    def __init__(self, nodes: int) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="peers-hedwig-")
        self.cluster = DevCluster(hubs=nodes, region="peers", base_dir=self._tmp.name).start()

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.addresses

    @property
    def server_pids(self) -> list[int]:
        """The hubs (ZooKeeper, Hedwig's metadata store, is not counted: Kafka's controller
        runs inside its broker process, but ZooKeeper is idle while topics are served)."""
        return [h.proc.pid for h in self.cluster.hub_procs if h.proc is not None]

    @property
    def memory_pids(self) -> list[int]:
        """The hubs and ZooKeeper: Kafka's metadata (KRaft) lives in its broker's memory,
        Hedwig's in ZooKeeper's, so memory is counted over both."""
        zk = self.cluster.zk_server
        extra = [zk.proc.pid] if zk is not None and zk.proc is not None else []
        return [*self.server_pids, *extra]

    def stop(self) -> None:
        self.cluster.stop()
        self._tmp.cleanup()


class RunningKafka:
    def __init__(self, classpath: str, nodes: int, durable: bool) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="peers-kafka-")
        self.cluster = KafkaCluster(
            classpath, Path(self._tmp.name), nodes=nodes, durable=durable
        ).start()

    @property
    def bootstrap(self) -> list[str]:
        return self.cluster.bootstrap

    @property
    def server_pids(self) -> list[int]:
        return self.cluster.pids

    @property
    def memory_pids(self) -> list[int]:
        return self.cluster.pids

    def stop(self) -> None:
        self.cluster.stop()
        self._tmp.cleanup()


def start(line: Line, nodes: int, classpaths: dict[str, str]) -> Running:
    """Start ``line``'s system; ``classpaths`` are the fetched Kafka versions' jars."""
    if line.system == "hedwig":
        return RunningHedwig(nodes)
    classpath = classpaths.get(line.version)
    if classpath is None:
        raise SystemExit(
            f"Kafka {line.version} is not fetched: run `make bench-peers` (bench/peers/fetch.py)"
        )
    return RunningKafka(classpath, nodes, line.durable)
