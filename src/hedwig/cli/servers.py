"""``hedwig zk`` and ``hedwig hub``: the servers."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import threading
import urllib.request

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import HedwigError
from hedwig.hub import serve
from hedwig.hub.config import HubConfig
from hedwig.net.loop import install_uvloop
from hedwig.placement import POLICIES


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("zk", help="run a standalone ZooKeeper for development")
    p.add_argument("--port", type=int, default=2181)
    p.add_argument("--data-dir", default=None, help="default: a temporary directory")
    p.add_argument("--host", default="127.0.0.1")
    p.set_defaults(func=run_zk)

    p = sub.add_parser(
        "drain",
        help="hand over every topic of a running hub (for a preStop hook)",
        description="POST /drain on a hub's metrics port: the hub stops taking topics, hands "
        "every topic it owns over to other hubs, and answers when it is done.",
    )
    p.add_argument("--metrics-port", type=int, default=9100)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--timeout", type=float, default=60.0)
    p.add_argument(
        "--token-file", help="a cluster admin's token (needed unless the hub is on this machine)"
    )
    p.set_defaults(func=run_drain)

    p = sub.add_parser(
        "hub",
        help="run a hub",
        description="Run a hub. Every flag can also be set as HEDWIG_<NAME> in the environment "
        "(e.g. HEDWIG_ZK, HEDWIG_REGION, HEDWIG_LISTEN, HEDWIG_DATA_DIR).",
    )
    p.add_argument("--zk", help="ZooKeeper connection string HOST:PORT[,HOST:PORT...]")
    p.add_argument("--region", help="region name (the ZooKeeper subtree /hedwig/<region>)")
    p.add_argument("--listen", help="HOST:PORT for clients (port 0: any free port)")
    p.add_argument("--advertise", help="address other hubs send clients to (default: --listen)")
    p.add_argument("--data-dir", help="where this hub's ledgers are stored")
    p.add_argument("--metrics-port", type=int, help="HTTP port for /metrics, /healthz, /readyz")
    p.add_argument("--metrics-host", help="HTTP listen host (default 127.0.0.1)")
    p.add_argument(
        "--zk-session-timeout",
        type=float,
        dest="zk_session_timeout_s",
        help="seconds; a crashed hub's topics move after about this long (default 6)",
    )
    p.add_argument("--placement", choices=POLICIES, help="how to choose a hub for a new topic")
    p.add_argument("--max-message-size", type=int, help="bytes (default 1 MiB)")
    p.add_argument(
        "--self-balance",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="shed load to other hubs by the shared policy (default on; off under an operator)",
    )
    p.add_argument(
        "--audit-interval",
        type=float,
        dest="audit_interval_s",
        help="seconds between ledger audits for under-replication (default 30)",
    )
    p.add_argument(
        "--load-report-interval",
        type=float,
        dest="load_report_interval_s",
        help="seconds between load reports in the alive znode (default 5)",
    )
    p.add_argument(
        "--balance-interval",
        type=float,
        dest="balance_interval_s",
        help="seconds between self-balancing cycles (default 60)",
    )
    p.add_argument(
        "--replication",
        help="region default ENSEMBLE/WRITE_QUORUM/ACK_QUORUM (default 3/3/2; 1/1/1 for one hub)",
    )
    g = p.add_argument_group("security (docs/security.md; all off by default)")
    g.add_argument("--tls-cert", help="this hub's certificate (PEM) for the client listener")
    g.add_argument("--tls-key", help="its private key (PEM)")
    g.add_argument("--tls-client-ca", help="CA of client certificates (accepted as identities)")
    g.add_argument("--internal-listen", help="HOST:PORT of the hub-to-hub listener")
    g.add_argument("--internal-advertise", help="address other hubs reach it at")
    g.add_argument("--internal-ca", help="the region's hub CA (peers must be signed by it)")
    g.add_argument("--internal-cert", help="this hub's certificate from the hub CA")
    g.add_argument("--internal-key", help="its private key")
    g.add_argument(
        "--authenticate",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every connection must prove an identity",
    )
    g.add_argument(
        "--authorize",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="every request needs an ACL allowing it (default deny)",
    )
    g.add_argument("--super-users", help="comma-separated principals allowed everything")
    g.add_argument(
        "--token-issuers", help="trusted token issuers: a JSON list, or @FILE holding one"
    )
    p.set_defaults(func=run_hub)


SECURITY_FLAGS = (
    "tls_cert",
    "tls_key",
    "tls_client_ca",
    "internal_listen",
    "internal_advertise",
    "internal_ca",
    "internal_cert",
    "internal_key",
    "authenticate",
    "authorize",
    "super_users",
    "token_issuers",
)


def run_drain(args: argparse.Namespace) -> int:
    url = f"http://{args.host}:{args.metrics_port}/drain"
    headers = {}
    if args.token_file:
        # From another machine a hub drains only for a cluster admin's token.
        with open(args.token_file) as f:
            headers["Authorization"] = f"Bearer {f.read().strip()}"
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, method="POST", headers=headers), timeout=args.timeout
        ) as r:
            print(r.read().decode().strip())
    except OSError as exc:
        print(f"hedwig drain: {url}: {exc}", file=sys.stderr)
        return 1
    return 0


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
        config = HubConfig.from_env(
            zk=args.zk,
            region=args.region,
            listen=args.listen,
            advertise=args.advertise,
            data_dir=args.data_dir,
            metrics_port=args.metrics_port,
            metrics_host=args.metrics_host,
            zk_session_timeout_s=args.zk_session_timeout_s,
            placement=args.placement,
            max_message_size=args.max_message_size,
            replication=args.replication,
            self_balance=args.self_balance,
            balance_interval_s=args.balance_interval_s,
            audit_interval_s=args.audit_interval_s,
            load_report_interval_s=args.load_report_interval_s,
            **{name: getattr(args, name) for name in SECURITY_FLAGS},
        )
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
