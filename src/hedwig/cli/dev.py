"""``hedwig dev up``: ZooKeeper and N hubs on this machine until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import HedwigError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dev", help="development cluster on this machine")
    dsub = p.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    up = dsub.add_parser("up", help="start ZooKeeper and hubs; stop them on Ctrl-C")
    up.add_argument("--hubs", type=int, default=3)
    up.add_argument("--region", default="dev")
    up.add_argument("--data-dir", default=None, help="keep data here (default: temporary)")
    up.add_argument("--zk-session-timeout", type=float, default=6.0)
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS, authentication and ACLs with a throwaway CA and credentials (printed)",
    )
    up.set_defaults(func=run_up)


def run_up(args: argparse.Namespace) -> int:
    if args.hubs < 1:
        print("hedwig dev up: --hubs must be at least 1", file=sys.stderr)
        return 2
    cluster = DevCluster(
        hubs=args.hubs,
        region=args.region,
        base_dir=args.data_dir,
        session_timeout_s=args.zk_session_timeout,
        secure=args.secure,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        cluster.start()
    except HedwigError as exc:
        print(f"hedwig dev up: {exc}", file=sys.stderr)
        return 1
    try:
        if cluster.security is not None:
            d = cluster.security.directory
            print(
                f"SECURE credentials in {d}: '. {d}/env' makes hedwig commands act as the "
                f"super-user admin ({d}/admin.crt); {d}/alice.crt has no ACLs until "
                "'hedwig acl add'",
                flush=True,
            )
        print(f"READY hubs={','.join(cluster.addresses)} zk={cluster.zk}", flush=True)
        while not done.wait(0.5):
            for h in cluster.hub_procs:
                if not h.running:
                    print(f"hedwig dev up: hub {h.address} exited:\n{h.tail()}", file=sys.stderr)
                    return 1
    finally:
        cluster.stop()
    return 0
