"""ZooKeeper and hub processes on one machine, for ``hedwig dev up``, the demo and tests.

Hubs are real ``hedwig hub`` processes on fixed loopback ports, so a hub restarted after a
``kill -9`` comes back under the same address with the same data directory, exactly as a pod of
a StatefulSet would. ``freeze``/``thaw`` send SIGSTOP/SIGCONT for the frozen-hub scenarios.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster import processes
from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.hosts import LOOPBACK, Host
from hedwig.devcluster.security import DevSecurity
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from hedwig.errors import HedwigError
from hedwig.settings import HubConfig, command_line
from hedwig.settings.exposure import is_loopback


@dataclass
class HubProcess:
    zk: str
    region: str
    data_dir: str
    port: int = 0
    metrics_port: int = 0
    session_timeout_s: float = 6.0
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # Where it runs (default: this machine's loopback); see ``hosts.py``.
    host: Host = LOOPBACK
    # The internal (hub-to-hub) listener's port; 0: none (security off).
    internal_port: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.port = self.port or free_port()
        self.metrics_port = self.metrics_port or free_port()

    @property
    def address(self) -> str:
        return f"{self.host.address}:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host.address}:{self.metrics_port}"

    @property
    def log_path(self) -> str:
        return os.path.join(self.data_dir, "hub.log")

    def start(self, timeout: float = 30.0, *, wait: bool = True) -> HubProcess:
        """Start the hub process; with ``wait``, return once it answers ready."""
        os.makedirs(self.data_dir, exist_ok=True)
        args = [
            *self.host.launch,
            sys.executable,
            "-m",
            "hedwig",
            "hub",
            *command_line(
                HubConfig,
                metadata_url=self.zk,
                region=self.region,
                listen=self.address,
                data_dir=self.data_dir,
                metrics_port=self.metrics_port,
                metrics_host=self.host.address,
                metadata_session_timeout_s=self.session_timeout_s,
                internal_listen=(
                    f"{self.host.address}:{self.internal_port}" if self.internal_port else None
                ),
            ),
            *self.extra_args,
        ]
        log = open(self.log_path, "ab")  # noqa: SIM115
        self.proc = subprocess.Popen(
            args,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env},
        )
        log.close()
        if wait:
            self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise HedwigError(f"hub {self.address} exited; see {self.log_path}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.metrics_url + "/readyz", timeout=1) as r:
                    if r.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                if exc.read().decode(errors="replace").startswith("too few hubs"):
                    return  # up, and as ready as a region this small can be (it says why)
            except OSError:
                pass
            time.sleep(0.05)
        raise HedwigError(f"hub {self.address} not ready within {timeout}s:\n{self.tail()}")

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(Path(self.log_path).read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def signal(self, sig: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self) -> None:
        """``kill -9``: no hand-off, no flush; the ZooKeeper session expires on its own."""
        processes.kill(self.proc)
        self.proc = None

    def freeze(self) -> None:
        self.signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait: the hub hands its topics over before it exits."""
        self.signal(signal.SIGCONT)  # a frozen hub cannot hand anything over
        code = processes.end(self.proc, grace_s=timeout)
        self.proc = None
        return code

    def restart(self, timeout: float = 30.0) -> None:
        self.stop()
        self.start(timeout)


@dataclass
class DevCluster:
    """A ZooKeeper and ``hubs`` hub processes; a context manager that cleans up after itself."""

    hubs: int = 3
    region: str = "default"
    base_dir: str | None = None
    session_timeout_s: float = 6.0
    # ENSEMBLE/WRITE/ACK for the region; by default 3/3/2 with three hubs or more, else every
    # hub holds every entry (1/1/1 for one hub, 2/2/2 for two).
    replication: str | None = None
    hub_args: list[str] = field(default_factory=list)
    # Ports to use when free (hub i takes hub_ports[i] = (client port, metrics port)), so a
    # cluster restarted on the same data directory keeps its addresses; 0 or missing: any.
    zk_port: int = 0
    hub_ports: list[tuple[int, int]] = field(default_factory=list)
    # Where ZooKeeper and hub i run (default: loopback), e.g. each in a network namespace.
    zk_host: Host = LOOPBACK
    hub_hosts: list[Host] = field(default_factory=list)
    # TLS, authentication, ACLs, an internal listener per hub and protected znodes, with
    # throwaway credentials under BASE/security (``DevSecurity``).
    secure: bool = False
    security: DevSecurity | None = field(default=None, init=False)
    # The metadata store: "zookeeper", or "etcd" (a real etcd, ``hedwig.devcluster.etcd``).
    store: str = "zookeeper"
    # ZooKeeper's JVM heap (``ZooKeeperServer.heap``): a region of many topics needs more.
    zk_heap: str = "256m"
    # etcd's memory budget (``EtcdServer.memory_limit``; None: Go's defaults).
    etcd_memory: str | None = None
    zk_server: ZooKeeperServer | None = field(default=None, init=False)
    etcd_server: EtcdServer | None = field(default=None, init=False)
    hub_procs: list[HubProcess] = field(default_factory=list, init=False)
    _tmp: tempfile.TemporaryDirectory[str] | None = field(default=None, init=False)

    @property
    def zk(self) -> str:
        """The metadata store's URL (a bare HOST:PORT for ZooKeeper), as hubs are given it."""
        if self.etcd_server is not None:
            return self.etcd_server.url
        assert self.zk_server is not None
        return self.zk_server.address

    @property
    def replication_setting(self) -> str:
        if self.replication:
            return self.replication
        n = min(self.hubs, 3)
        return "3/3/2" if n >= 3 else f"{n}/{n}/{n}"

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hub_procs]

    def start(self) -> DevCluster:
        if self.base_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="hedwig-dev-")
            self.base_dir = self._tmp.name
        if self.secure:
            hosts = {"127.0.0.1", self.zk_host.address, *(h.address for h in self.hub_hosts)}
            self.security = DevSecurity.create(
                os.path.join(self.base_dir, "security"), ip_addresses=sorted(hosts)
            )
        if self.store == "etcd":
            data = os.path.join(self.base_dir, "etcd")
            os.makedirs(data, exist_ok=True)
            self.etcd_server = EtcdServer(
                data_dir=data,
                port=self.zk_port if port_free(self.zk_port) else 0,
                host=self.zk_host.address,
                launch=self.zk_host.launch,
                security=self.security.etcd_security() if self.security else None,
                memory_limit=self.etcd_memory,
            )
            self.etcd_server.start()
        else:
            self.zk_server = ZooKeeperServer(
                port=self.zk_port if port_free(self.zk_port) else 0,
                data_dir=os.path.join(self.base_dir, "zk"),
                host=self.zk_host.address,
                launch=self.zk_host.launch,
                heap=self.zk_heap,
            ).start()
        try:
            # All at once, then wait: a new region's first hub is not ready until enough hubs
            # for the replication have joined (as the pods of a StatefulSet start in parallel).
            started = [self.add_hub(wait=False) for _ in range(self.hubs)]
            for hub in started:
                hub.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def add_hub(self, *, extra_args: list[str] | None = None, wait: bool = True) -> HubProcess:
        assert self.base_dir is not None
        i = len(self.hub_procs)
        port, metrics = self.hub_ports[i] if i < len(self.hub_ports) else (0, 0)
        host = self.hub_hosts[i] if i < len(self.hub_hosts) else LOOPBACK
        hub = HubProcess(
            self.zk,
            self.region,
            os.path.join(self.base_dir, f"hub{i}"),
            port=port if port_free(port) else 0,
            metrics_port=metrics if port_free(metrics) else 0,
            session_timeout_s=self.session_timeout_s,
            host=host,
            env=self.security.hub_env() if self.security else {},
            internal_port=free_port() if self.security else 0,
            extra_args=[
                "--replication",
                self.replication_setting,
                # Off loopback (a network namespace's address) an open hub is told it is.
                *([] if self.security or is_loopback(host.address) else ["--insecure"]),
                *self.hub_args,
                *(extra_args or []),
            ],
        )
        self.hub_procs.append(hub)
        hub.start(wait=wait)
        return hub

    def hub_at(self, address: str) -> HubProcess:
        for h in self.hub_procs:
            if h.address == address:
                return h
        raise KeyError(address)

    def stop(self) -> None:
        for h in self.hub_procs:
            try:
                h.stop()
            except Exception:
                h.kill()
        if self.zk_server is not None:
            self.zk_server.stop()
        if self.etcd_server is not None:
            self.etcd_server.stop()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def port_free(port: int) -> bool:
    """Whether ``port`` can be listened on at 127.0.0.1 (0: never, ask for any)."""
    if not port:
        return False
    with socket.socket() as s:
        # As the servers bind: a connection lingering in TIME_WAIT does not hold the port.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.5):
            return True
    except OSError:
        return False
