"""``hedwig zk`` and ``hedwig hub``: the servers."""

from __future__ import annotations

import argparse
import asyncio
import http.client
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request

from hedwig.cli.output import Progress
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import HedwigError
from hedwig.hub import serve
from hedwig.net.loop import install_uvloop
from hedwig.settings import HubConfig, add_flags, given_flags
from hedwig.settings.exposure import check_exposure


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "zk",
        help="run a standalone ZooKeeper for development",
        description="Run Debian's ZooKeeper server (make zookeeper installs it) on one port "
        "until Ctrl-C; hubs and commands take it as --metadata HOST:PORT.",
    )
    p.add_argument("--port", type=int, default=2181, help="client port (default 2181)")
    p.add_argument(
        "--data-dir", default=None, help="where it keeps its data (default: a temporary directory)"
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.set_defaults(func=run_zk)

    p = sub.add_parser(
        "drain",
        help="hand over every topic of a running hub (for a preStop hook)",
        description="POST /drain on a hub's metrics port, or its local socket (--socket): the "
        "hub stops taking topics, hands every topic it owns over to other hubs, and answers "
        "when it is done. A secured hub drains through its socket, or for a cluster admin's "
        "token (sent in the clear: the metrics port is plain HTTP).",
    )
    p.add_argument(
        "--metrics-port", type=int, default=9100, help="the hub's metrics port (default 9100)"
    )
    p.add_argument("--host", default="127.0.0.1", help="the hub's host (default 127.0.0.1)")
    p.add_argument(
        "--socket",
        help="the hub's drain socket (its drain_socket setting), instead of --host and "
        "--metrics-port: needs no token",
    )
    p.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for the hand-off (default 60)"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="drain even the last alive hub (its topics then wait for a hub to come back)",
    )
    p.add_argument(
        "--token-file", help="a cluster admin's token (needed unless the hub is on this machine)"
    )
    p.set_defaults(func=run_drain)

    p = sub.add_parser(
        "hub",
        help="run a hub",
        description="Run a hub. Every setting is a flag and an environment variable "
        "HEDWIG_<NAME> (e.g. HEDWIG_METADATA, HEDWIG_REGION, HEDWIG_LISTEN, HEDWIG_DATA_DIR); "
        "flags win. docs/operations.md lists them all.",
    )
    add_flags(p, HubConfig)
    p.set_defaults(func=run_hub)


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over a Unix socket: the standard client, connected to a file instead of a port."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _unix_request(path: str, method: str, target: str, timeout: float) -> tuple[int, str]:
    conn = _UnixHTTPConnection(path, timeout)
    try:
        conn.request(method, target)
        response = conn.getresponse()
        return response.status, response.read().decode().strip()
    finally:
        conn.close()


def run_drain(args: argparse.Namespace) -> int:
    base = f"http://{args.host}:{args.metrics_port}"
    query = "?force=1" if args.force else ""
    url = f"{base}/drain{query}"
    headers = {}
    if args.token_file:
        # Not through the socket, a secured hub drains only for a cluster admin's token.
        with open(args.token_file) as f:
            headers["Authorization"] = f"Bearer {f.read().strip()}"
    answer: list[str] = []
    failure: list[str] = []

    def drain() -> None:
        if args.socket:
            try:
                status, text = _unix_request(args.socket, "POST", f"/drain{query}", args.timeout)
            except (OSError, http.client.HTTPException) as exc:
                failure.append(f"{args.socket}: {exc}")
                return
            (answer if status == 200 else failure).append(text or f"HTTP {status}")
            return
        try:
            with urllib.request.urlopen(
                urllib.request.Request(url, method="POST", headers=headers), timeout=args.timeout
            ) as r:
                answer.append(r.read().decode().strip())
        except urllib.error.HTTPError as exc:
            failure.append(exc.read().decode().strip() or str(exc))
        except OSError as exc:
            failure.append(f"{url}: {exc}")

    worker = threading.Thread(target=drain, daemon=True)
    worker.start()
    progress = Progress()
    start = time.monotonic()
    where = args.socket or f"{args.host}:{args.metrics_port}"
    while worker.is_alive():
        worker.join(0.5)
        if worker.is_alive() and progress.enabled:
            left = _owned_topics(base, args.socket)
            progress.show(
                f"draining {where}: "
                f"{'?' if left is None else left} topics left, {time.monotonic() - start:.0f} s"
            )
    progress.done()
    if failure:
        print(f"hedwig drain: {failure[0]}", file=sys.stderr)
        return 1
    print(answer[0] if answer else "drained")
    return 0


def _owned_topics(base: str, socket_path: str | None = None) -> int | None:
    """The hub's ``hedwig_topics_owned`` gauge, for drain progress (None if unreadable)."""
    try:
        if socket_path:
            text = _unix_request(socket_path, "GET", "/metrics", 1)[1]
        else:
            with urllib.request.urlopen(f"{base}/metrics", timeout=1) as r:
                text = r.read().decode()
        for line in text.splitlines():
            if line.startswith("hedwig_topics_owned "):
                return int(float(line.split()[1]))
    except (OSError, ValueError, http.client.HTTPException):
        pass
    return None


def run_zk(args: argparse.Namespace) -> int:
    server = ZooKeeperServer(port=args.port, data_dir=args.data_dir, host=args.host)
    try:
        server.start()
    except HedwigError as exc:
        print(f"hedwig zk: {exc}", file=sys.stderr)
        return 1
    print(f"ZK {server.address}", flush=True)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        while not done.wait(0.5):
            if server.proc is None or server.proc.poll() is not None:
                print("hedwig zk: ZooKeeper exited", file=sys.stderr)
                return 1
    finally:
        server.stop()
    return 0


def run_hub(args: argparse.Namespace) -> int:
    try:
        config = HubConfig.from_env(**given_flags(args, HubConfig))
        # Open to the network only when told so (hedwig.settings.exposure).
        check_exposure(config)
    except HedwigError as exc:
        print(f"hedwig hub: {exc}", file=sys.stderr)
        return 2
    install_uvloop()
    try:
        asyncio.run(serve(config))
    except HedwigError as exc:
        print(f"hedwig hub: {exc}", file=sys.stderr)
        return 1
    return 0
