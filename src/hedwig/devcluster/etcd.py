"""A standalone etcd server for development and tests.

The server is the real one, built from Go modules by ``e2e/controlplane/build.sh`` (the e2e
control plane's etcd; ``make etcd`` builds it) and cached under
``~/.cache/hedwig/controlplane/<versions>/bin/etcd``. ``HEDWIG_ETCD`` names another binary.
It listens on loopback ports of its own, with its data in a directory of its own.

With ``security`` (``EtcdSecurity``) it runs as a secured production etcd does: clients reach
it over TLS only and must present a certificate of the trusted CA (``--client-cert-auth``), and
its authentication is on, with a ``root`` user and one user for Hedwig whose role may read and
write only under Hedwig's prefix (``/hedwig/``), so a Hedwig credential cannot touch another
tenant's keys. Users and roles are made through etcd's own ``Auth`` API on the first start (they
live in the data directory after that). Its peer port, which a single member never dials but
serves (raft, and ``/leases``, where followers forward lease keep-alives to the leader: anyone
reaching it plaintext kept a killed hub's lease, and with it the hub's claims, alive), is TLS
too and admits only a certificate of the peer CA, which no client holds.

Run as a production etcd for Hedwig should be: etcd keeps every revision until it is compacted,
and a region writes one per consume mark, claim and ledger change, so its history is compacted
every ``COMPACTION_RETENTION`` (a watch from before that fires at once, and its holder reads
again); the backend may grow to ``QUOTA_BYTES`` (etcd's suggested maximum; the 2 GiB default
is what a million topics' records and their history come near).
"""

from __future__ import annotations

import glob
import os
import ssl
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster.zookeeper import free_port
from hedwig.errors import HedwigError
from hedwig.metadata.etcd import PrefixUser, set_up_authentication

COMPACTION_RETENTION = "5m"
QUOTA_BYTES = 8 * 1024**3
# etcd's Go collector when the server is given a memory budget (``EtcdServer.memory_limit``).
# Go's default (GOGC=100) marks the whole heap each time etcd has allocated as much again as
# it holds live, and a region's records are most of that heap (about 2.7 KB a topic): at
# 300,000 topics a failover's writes started a cycle every few seconds, each marking close to
# a gigabyte, a third of etcd's CPU in the failover's profile, on the cores the hubs taking
# the topics over needed (their own collector pauses grew a third as well). With a budget,
# etcd collects a quarter as often and never lets its heap past the budget (GOMEMLIMIT), as
# ZooKeeper's JVM is given a heap sized for the region.
GOGC_WITH_LIMIT = 400


class EtcdNotFound(HedwigError):
    pass


def find_etcd() -> str:
    env = os.environ.get("HEDWIG_ETCD")
    if env:
        return env
    cache = Path(os.environ.get("HEDWIG_CACHE", Path.home() / ".cache" / "hedwig"))
    found = sorted(
        glob.glob(str(cache / "controlplane" / "*" / "bin" / "etcd")), key=os.path.getmtime
    )
    if found:
        return found[-1]
    raise EtcdNotFound(
        "no etcd found: build it with `make etcd` (e2e/controlplane/build.sh), or set HEDWIG_ETCD"
    )


@dataclass(frozen=True)
class EtcdSecurity:
    """Paths of PEM files and the credentials a secured etcd is set up with."""

    # The server's certificate and key (naming the address it listens on).
    cert: str
    key: str
    # The CA that signed the server's certificate and every client certificate it accepts.
    ca: str
    # A client certificate of that CA, for this module's own calls (health, users and roles).
    client_cert: str
    client_key: str
    # The user Hedwig's processes authenticate as, and etcd's administrator's password.
    user: str
    password: str
    root_password: str
    # The peer listener's certificate and key, and the CA a peer's certificate must come from:
    # one of its own (no client certificate passes; the dev CA's key is not kept at all).
    peer_cert: str
    peer_key: str
    peer_ca: str
    # Hedwig's user may read and write every key under it, and no other.
    prefix: str = "/hedwig/"


@dataclass
class EtcdServer:
    data_dir: str
    port: int = 0
    binary: str = field(default_factory=find_etcd)
    # Where it listens, and a command prefix to run it there (a network namespace).
    host: str = "127.0.0.1"
    launch: tuple[str, ...] = ()
    security: EtcdSecurity | None = None
    # A memory budget for the server (Go's GOMEMLIMIT, e.g. "4096MiB"), with the collector
    # at ``GOGC_WITH_LIMIT``; None: Go's defaults, enough for tests and small regions.
    memory_limit: str | None = None
    _proc: subprocess.Popen[bytes] | None = None
    _peer_port: int = 0

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.address}"

    @property
    def peer_address(self) -> str:
        """Where the peer listener is (known once started)."""
        return f"{self.host}:{self._peer_port}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.memory_limit is not None:
            env["GOMEMLIMIT"] = self.memory_limit
            env["GOGC"] = str(GOGC_WITH_LIMIT)
        return env

    def start(self, timeout: float = 30.0) -> None:
        if not self.port:
            self.port = free_port()
        if not self._peer_port:
            self._peer_port = free_port()
        sec = self.security
        scheme = "https" if sec else "http"
        client = f"{scheme}://{self.host}:{self.port}"
        peer = f"{scheme}://{self.host}:{self._peer_port}"
        tls = (
            [
                f"--cert-file={sec.cert}",
                f"--key-file={sec.key}",
                f"--trusted-ca-file={sec.ca}",
                "--client-cert-auth",
                f"--peer-cert-file={sec.peer_cert}",
                f"--peer-key-file={sec.peer_key}",
                f"--peer-trusted-ca-file={sec.peer_ca}",
                "--peer-client-cert-auth",
            ]
            if sec
            else []
        )
        log = open(Path(self.data_dir) / "etcd.log", "ab")  # noqa: SIM115 - the server keeps it
        self._proc = subprocess.Popen(
            [
                *self.launch,
                self.binary,
                "--name=hedwig",
                f"--data-dir={Path(self.data_dir) / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=hedwig={peer}",
                "--log-level=warn",
                "--auto-compaction-mode=periodic",
                f"--auto-compaction-retention={COMPACTION_RETENTION}",
                f"--quota-backend-bytes={QUOTA_BYTES}",
                *tls,
            ],
            stdout=log,
            stderr=log,
            env=self._environment(),
        )
        context = None
        if sec is not None:
            context = ssl.create_default_context(cafile=sec.ca)
            context.load_cert_chain(sec.client_cert, sec.client_key)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HedwigError(f"etcd exited with {self._proc.returncode}: see {log.name}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1, context=context) as r:
                    if b'"health":"true"' in r.read():
                        break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            raise HedwigError(f"etcd did not become healthy on {self.address} within {timeout} s")
        if sec is not None:
            self._set_up_authentication(sec)

    def _set_up_authentication(self, sec: EtcdSecurity) -> None:
        """The root user, Hedwig's user with a role on Hedwig's prefix only, authentication
        on; nothing if that was done on this data directory already (a restart)."""
        done = Path(self.data_dir) / "authentication-on"
        if done.exists():
            return
        if set_up_authentication(
            self.address,
            ca=Path(sec.ca).read_bytes(),
            cert=Path(sec.client_cert).read_bytes(),
            key=Path(sec.client_key).read_bytes(),
            account=PrefixUser(sec.user, sec.password, sec.root_password, sec.prefix),
        ):
            done.touch()

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc = None

    def kill(self) -> None:
        """``kill -9``: no chance to flush anything."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._proc = None

    def restart(self) -> None:
        """Stop and start again on the same ports and data."""
        self.stop()
        self.start()
