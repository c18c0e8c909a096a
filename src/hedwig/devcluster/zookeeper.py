"""A standalone ZooKeeper server for development and tests.

The server is the real one: Debian's ``zookeeper`` package (``/usr/share/java/zookeeper.jar``)
or the ZooKeeper jars that pyspark ships, started with ``ZooKeeperServerMain`` on a loopback
port. ``HEDWIG_ZOOKEEPER_CLASSPATH`` overrides the search.
"""

from __future__ import annotations

import base64
import glob
import hashlib
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster import processes
from hedwig.errors import HedwigError

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"


class ZooKeeperNotFound(HedwigError):
    pass


def find_classpath() -> str:
    env = os.environ.get("HEDWIG_ZOOKEEPER_CLASSPATH")
    if env:
        return env
    if os.path.exists(DEBIAN_JAR):
        return DEBIAN_JAR  # its manifest names its dependencies
    try:
        import pyspark  # type: ignore[import-not-found, unused-ignore]

        jars = Path(pyspark.__file__).parent / "jars"
        if glob.glob(str(jars / "zookeeper-*.jar")):
            return str(jars / "*")
    except ImportError:
        pass
    raise ZooKeeperNotFound(
        "no ZooKeeper found: install Debian's 'zookeeper' package (make deps does), "
        "or set HEDWIG_ZOOKEEPER_CLASSPATH"
    )


# Ports handed out from below the kernel's ephemeral range (32768 and up by default): a port
# the kernel picks for us is one it may give the very next outgoing connection, and a server
# started a moment later then fails to bind. Connections never take a port from here.
_PORTS_LOW, _PORTS_HIGH = 20_000, 32_000
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback TCP port nothing listens on, not handed out before by this process."""
    for _ in range(200):
        port = random.randrange(_PORTS_LOW, _PORTS_HIGH)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # the range is crowded: let the kernel choose
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ruok(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(b"ruok")
            return s.recv(16) == b"imok"
    except OSError:
        return False


@dataclass
class ZooKeeperServer:
    """A ZooKeeper child process; ``start`` waits until it answers ``ruok``."""

    port: int = 0
    data_dir: str | None = None
    host: str = "127.0.0.1"
    tick_ms: int = 200
    max_session_timeout_ms: int = 60_000
    log_path: str | None = None
    # A command prefix that starts the server elsewhere, e.g. ``ip netns exec NS``.
    launch: tuple[str, ...] = ()
    # The JVM's heap: enough for tests and the development cluster; a region with 100,000
    # topics (half a million znodes) needs a couple of gigabytes (bench/scale.py).
    heap: str = "256m"
    # ``USER:PASSWORD`` of ZooKeeper's super-user (its digest-scheme identity may do anything,
    # whatever a znode's ACL), as the chart's ZooKeeper has one for the operator's admin
    # digest; empty: none.
    super_digest: str = ""
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)
    _tmp: str | None = field(default=None, init=False)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, timeout: float = 30.0) -> ZooKeeperServer:
        if not self.port:
            self.port = free_port()
        if self.data_dir is None:
            self._tmp = tempfile.mkdtemp(prefix="hedwig-zk-")
            self.data_dir = self._tmp
        os.makedirs(self.data_dir, exist_ok=True)
        cfg = Path(self.data_dir) / "zoo.cfg"
        cfg.write_text(
            "\n".join(
                [
                    f"tickTime={self.tick_ms}",
                    f"dataDir={self.data_dir}",
                    f"clientPort={self.port}",
                    f"clientPortAddress={self.host}",
                    "admin.enableServer=false",
                    f"minSessionTimeout={2 * self.tick_ms}",
                    f"maxSessionTimeout={self.max_session_timeout_ms}",
                    "4lw.commands.whitelist=ruok,stat,mntr,srvr,cons",
                    "maxClientCnxns=0",
                    "",
                ]
            )
        )
        java = shutil.which("java") or "java"
        log = open(self.log_path or os.path.join(self.data_dir, "zookeeper.log"), "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                *self.launch,
                java,
                f"-Xmx{self.heap}",
                "-Dzookeeper.jmx.log4j.disable=true",
                *self._super_flags(),
                "-cp",
                find_classpath(),
                "org.apache.zookeeper.server.ZooKeeperServerMain",
                str(cfg),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HedwigError(
                    f"ZooKeeper exited with {self.proc.returncode}; see {self.data_dir}"
                )
            if ruok(self.host, self.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise HedwigError(f"ZooKeeper did not start within {timeout}s")

    def _super_flags(self) -> list[str]:
        if not self.super_digest:
            return []
        user, _, password = self.super_digest.partition(":")
        hashed = base64.b64encode(hashlib.sha1(f"{user}:{password}".encode()).digest()).decode()
        return [f"-Dzookeeper.DigestAuthenticationProvider.superDigest={user}:{hashed}"]

    def stop(self) -> None:
        processes.end(self.proc, grace_s=10)
        self.proc = None
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None

    def kill(self) -> None:
        processes.kill(self.proc)
        self.proc = None

    def restart(self, timeout: float = 30.0) -> None:
        """Stop and start again on the same port and data (for ZooKeeper-restart tests)."""
        tmp, self._tmp = self._tmp, None
        self.stop()
        self._tmp = tmp
        self.start(timeout)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
