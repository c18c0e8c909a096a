"""A standalone etcd server for development and tests.

The server is the real one, built from Go modules by ``e2e/controlplane/build.sh`` (the e2e
control plane's etcd; ``make etcd`` builds it) and cached under
``~/.cache/hedwig/controlplane/<versions>/bin/etcd``. ``HEDWIG_ETCD`` names another binary.
It listens on loopback ports of its own, with its data in a directory of its own.

Run as a production etcd for Hedwig should be: etcd keeps every revision until it is compacted,
and a region writes one per consume mark, claim and ledger change, so its history is compacted
every ``COMPACTION_RETENTION`` (a watch from before that fires at once, and its holder reads
again); the backend may grow to ``QUOTA_BYTES`` (etcd's suggested maximum; the 2 GiB default
is what a million topics' records and their history come near).
"""

from __future__ import annotations

import glob
import os
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster.zookeeper import free_port
from hedwig.errors import HedwigError

COMPACTION_RETENTION = "5m"
QUOTA_BYTES = 8 * 1024**3


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


@dataclass
class EtcdServer:
    data_dir: str
    port: int = 0
    binary: str = field(default_factory=find_etcd)
    _proc: subprocess.Popen[bytes] | None = None
    _peer_port: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"etcd://{self.address}"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def start(self, timeout: float = 30.0) -> None:
        if not self.port:
            self.port = free_port()
        if not self._peer_port:
            self._peer_port = free_port()
        client = f"http://127.0.0.1:{self.port}"
        peer = f"http://127.0.0.1:{self._peer_port}"
        log = open(Path(self.data_dir) / "etcd.log", "ab")  # noqa: SIM115 - the server keeps it
        self._proc = subprocess.Popen(
            [
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
            ],
            stdout=log,
            stderr=log,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise HedwigError(f"etcd exited with {self._proc.returncode}: see {log.name}")
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=1) as r:
                    if b'"health":"true"' in r.read():
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise HedwigError(f"etcd did not become healthy on {self.address} within {timeout} s")

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
