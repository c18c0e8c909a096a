"""Controlling a running development cluster from other commands.

``hedwig dev up`` owns the ZooKeeper and hub processes. It listens on a Unix socket next to its
state file, and ``hedwig dev status|kill|stop|restart|down`` send it one JSON line each and get
one back: killing a hub (``kill -9``: no hand-off, as a crash), stopping it gracefully, starting
it again on the same port and data, or stopping everything. The state file
(``hedwig.cli.common.dev_state_path``) holds the endpoints, so that the other commands find the
cluster without addresses.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hedwig.devcluster.cluster import DevCluster, HubProcess
from hedwig.errors import HedwigError, UsageError


def describe(cluster: DevCluster) -> dict[str, Any]:
    """The cluster's endpoints and state, as the state file and ``dev status`` show them."""
    return {
        "region": cluster.region,
        "zk": cluster.zk,
        "data_dir": cluster.base_dir,
        "replication": cluster.replication_setting,
        "hubs": [
            {
                "index": i,
                "address": h.address,
                "metrics": h.metrics_url,
                "running": h.running,
                "pid": h.proc.pid if h.proc is not None else None,
                "data_dir": h.data_dir,
            }
            for i, h in enumerate(cluster.hub_procs)
        ],
    }


class ControlServer:
    """Serves control requests for ``cluster`` on a Unix socket, one thread per request."""

    def __init__(
        self, cluster: DevCluster, socket_path: Path, on_change: Callable[[], None]
    ) -> None:
        self.cluster = cluster
        self.path = socket_path
        self._on_change = on_change
        self._lock = threading.Lock()
        self.shutdown_requested = threading.Event()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                try:
                    request = json.loads(self.rfile.readline())
                    answer = outer.apply(request)
                except (ValueError, HedwigError, KeyError) as exc:
                    answer = {"ok": False, "error": str(exc)}
                self.wfile.write(json.dumps(answer).encode() + b"\n")

        with_socket = self.path
        with_socket.parent.mkdir(parents=True, exist_ok=True)
        if with_socket.exists():
            with_socket.unlink()
        self._server = socketserver.ThreadingUnixStreamServer(str(with_socket), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self.path.exists():
            self.path.unlink()

    def _hub(self, which: str) -> HubProcess:
        hubs = self.cluster.hub_procs
        if which.isdigit() and int(which) < len(hubs):
            return hubs[int(which)]
        for h in hubs:
            if h.address == which or h.address.endswith(":" + which):
                return h
        raise UsageError(f"no hub {which!r}: give its index (0..{len(hubs) - 1}) or address")

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        with self._lock:
            if op == "status":
                return {"ok": True, "cluster": describe(self.cluster)}
            if op == "down":
                self.shutdown_requested.set()
                return {"ok": True}
            hub = self._hub(str(request.get("hub", "")))
            if op == "kill":
                hub.kill()
            elif op == "stop":
                hub.stop()
            elif op == "restart":
                if hub.running:
                    hub.stop()
                hub.start()
            else:
                raise UsageError(f"unknown operation {op!r}")
            self._on_change()
            return {"ok": True, "hub": hub.address, "running": hub.running}


def request(socket_path: Path, message: dict[str, Any], timeout: float = 60.0) -> dict[str, Any]:
    """Send one request to a running ``hedwig dev up``; its answer."""
    if not socket_path.exists():
        raise UsageError("no development cluster is running here ('hedwig dev up' starts one)")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(str(socket_path))
        except OSError as exc:
            raise UsageError(
                f"the development cluster does not answer ({exc}); is 'hedwig dev up' running?"
            ) from exc
        s.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, Any] = json.loads(data or b"{}")
    if not answer.get("ok"):
        raise UsageError(str(answer.get("error", "the development cluster refused")))
    return answer


_state_lock = threading.Lock()


def write_state(path: Path, state: dict[str, Any]) -> None:
    """Replace the state file at once (readers never see half of it). Two threads write it:
    the control server after a request and ``dev up``'s watch loop when a hub goes down, both
    straight after a ``dev kill``. With one shared temporary file, the second ``os.replace``
    found it gone, and the error ended ``dev up`` and with it every hub."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _state_lock:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=2))
        os.replace(tmp, path)
