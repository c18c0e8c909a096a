"""``hedwig dev``: a development cluster on this machine (ZooKeeper and N hub processes).

``dev up`` starts it and keeps it until Ctrl-C (or ``dev down``); a hub that dies is reported
and left dead, as in production, so failover can be watched, and ``dev restart`` brings it
back on the same port and data. ``dev kill`` is a crash (``kill -9``), ``dev stop`` a graceful
stop (the hub hands its topics over). Ports: 24000 for ZooKeeper and 24001, 24002... for hubs
(metrics on 24101...) when free, and with ``--data-dir`` the ports of the previous run, so
addresses survive restarts. They sit below Linux's ephemeral range (32768 and up), where an
outgoing connection could hold one by chance. The endpoints go into a state file, where the
other commands find them when given no ``--hub`` or ``--metadata``.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from hedwig.cli.common import DEFAULT_REGION, add_json_option, dev_state_path, report
from hedwig.cli.dev_regions import run_regions
from hedwig.cli.output import emit
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.control import ControlServer, describe, request, write_state
from hedwig.errors import HedwigError, UsageError
from hedwig.settings import HubConfig, add_flag, command_line, lookup

ZK_PORT = 24000
HUB_PORT = 24001
METRICS_PORT = 24101
DETACH_WAIT_S = 120.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("dev", help="development cluster on this machine")
    dsub = p.add_subparsers(dest="dev_command", required=True, metavar="ACTION")
    up = dsub.add_parser(
        "up",
        help="start the metadata store and hubs; keep them until Ctrl-C",
        description="Start ZooKeeper (or etcd) and hubs on this machine, print every endpoint "
        "and READY hubs=... zk=..., and keep them until Ctrl-C or 'hedwig dev down'. The other "
        "commands find the cluster by themselves. Ports: 24000 for the store, 24001... for "
        "hubs and 24101... for their metrics, when free.",
    )
    up.add_argument("--hubs", type=int, default=3, help="hub processes (default 3)")
    up.add_argument(
        "--regions",
        type=int,
        default=1,
        help="linked regions a, b, ..., each with a store and hubs of its own (default 1)",
    )
    up.add_argument(
        "--region", default=DEFAULT_REGION, help=f"the hubs' region (default {DEFAULT_REGION})"
    )
    up.add_argument(
        "--data-dir",
        default=None,
        help="keep data, ports and credentials here, for the next start (default: temporary)",
    )
    add_flag(
        up,
        lookup(HubConfig, "metadata_session_timeout_s"),
        default=6.0,
        help="seconds before a crashed hub's topics move (default 6)",
    )
    up.add_argument(
        "--store",
        choices=("zookeeper", "etcd"),
        default="zookeeper",
        help="the metadata store (default zookeeper; etcd: built by 'make etcd'; with "
        "--secure, TLS with client certificates and etcd's authentication, Hedwig's user "
        "confined to its prefix)",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="TLS, authentication and ACLs with a throwaway CA and credentials (printed)",
    )
    up.add_argument(
        "--replication",
        default=None,
        help="ENSEMBLE/WRITE_QUORUM/ACK_QUORUM (default 3/3/2 with 3 hubs or more, else N/N/N)",
    )
    up.add_argument(
        "--detach",
        "-d",
        action="store_true",
        help="run in the background once ready ('hedwig dev down' stops it; log beside the state)",
    )
    up.set_defaults(func=run_up)

    status = dsub.add_parser("status", help="the running cluster's endpoints and hubs")
    add_json_option(status)
    status.set_defaults(func=run_status)
    for name, text in (
        ("kill", "kill -9 a hub (a crash: no hand-off)"),
        ("stop", "stop a hub gracefully (it hands its topics over)"),
        ("restart", "start a hub again, on the same port and data"),
    ):
        c = dsub.add_parser(name, help=text)
        c.add_argument("hub", help="the hub's index (0, 1, ...) or address")
        c.set_defaults(func=run_control, op=name)
    down = dsub.add_parser("down", help="stop the running cluster")
    down.set_defaults(func=run_control, op="down", hub="")


def _socket() -> Path:
    return dev_state_path().with_suffix(".sock")


def _saved_ports(data_dir: str | None) -> tuple[int, list[tuple[int, int]]]:
    """The ports of the previous run on ``data_dir``, else the defaults."""
    defaults = (ZK_PORT, [(HUB_PORT + i, METRICS_PORT + i) for i in range(64)])
    if data_dir is None:
        return defaults
    try:
        saved = json.loads((Path(data_dir) / "cluster.json").read_text())
        ports = [(int(h["port"]), int(h["metrics_port"])) for h in saved["hubs"]]
        return int(saved["zk_port"]), ports + defaults[1][len(ports) :]
    except (OSError, ValueError, KeyError, TypeError):
        return defaults


def _save_ports(cluster: DevCluster) -> None:
    assert cluster.base_dir is not None
    store = cluster.zk_server or cluster.etcd_server
    assert store is not None
    saved = {
        "zk_port": store.port,
        "hubs": [{"port": h.port, "metrics_port": h.metrics_port} for h in cluster.hub_procs],
    }
    (Path(cluster.base_dir) / "cluster.json").write_text(json.dumps(saved))


def run_up(args: argparse.Namespace) -> int:
    if args.hubs < 1:
        return report("dev up", UsageError("--hubs must be at least 1"))
    if args.detach:
        return _detach(args)
    if args.regions != 1:
        return run_regions(args, _socket())
    if _socket().exists():
        try:
            request(_socket(), {"op": "status"}, timeout=2)
            return report(
                "dev up",
                UsageError("a development cluster is already running ('hedwig dev down')"),
            )
        except UsageError:
            pass  # a stale socket: its cluster is gone
    zk_port, hub_ports = _saved_ports(args.data_dir)
    cluster = DevCluster(
        hubs=args.hubs,
        region=args.region,
        base_dir=args.data_dir,
        session_timeout_s=args.metadata_session_timeout_s,
        replication=args.replication,
        zk_port=zk_port,
        hub_ports=hub_ports,
        secure=args.secure,
        store=args.store,
    )
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    try:
        cluster.start()
    except HedwigError as exc:
        return report("dev up", exc)
    state_path = dev_state_path()
    control = ControlServer(cluster, _socket(), lambda: write_state(state_path, describe(cluster)))
    try:
        if args.data_dir is not None:
            _save_ports(cluster)
        write_state(state_path, describe(cluster))
        control.start()
        _print_endpoints(cluster, state_path)
        if cluster.security is None:
            # Loopback only (hedwig.settings.exposure): open to this machine's users alone.
            print(
                "OPEN no TLS, no authentication: anyone on this machine can publish, read and "
                "delete topics and ledgers (the hubs listen on loopback only); --secure turns "
                "security on",
                flush=True,
            )
        else:
            d = cluster.security.directory
            print(
                f"SECURE credentials in {d}: '. {d}/env' makes hedwig commands act as the "
                f"super-user admin ({d}/admin.crt); {d}/alice.crt has no ACLs until "
                "'hedwig acl add'",
                flush=True,
            )
        print(f"READY hubs={','.join(cluster.addresses)} zk={cluster.zk}", flush=True)
        known_dead: set[str] = set()
        while not done.wait(0.5) and not control.shutdown_requested.is_set():
            for i, h in enumerate(cluster.hub_procs):
                if not h.running and h.address not in known_dead:
                    known_dead.add(h.address)
                    print(
                        f"hub {i} ({h.address}) is down; 'hedwig dev restart {i}' starts it again",
                        file=sys.stderr,
                        flush=True,
                    )
                    try:
                        write_state(state_path, describe(cluster))
                    except OSError as exc:
                        # The hubs go on; only ``dev status`` is out of date.
                        print(f"cannot update {state_path}: {exc}", file=sys.stderr, flush=True)
                elif h.running:
                    known_dead.discard(h.address)
    finally:
        control.close()
        cluster.stop()
        if state_path.exists():
            state_path.unlink()
    return 0


def _detach(args: argparse.Namespace) -> int:
    """Start ``dev up`` again as a background process in its own session (a closed terminal does
    not stop it), wait until it is ready, print its endpoints and return."""
    argv = [sys.executable, "-m", "hedwig", "dev", "up", "--hubs", str(args.hubs)]
    argv += ["--regions", str(args.regions)]
    argv += ["--region", args.region]
    argv += command_line(HubConfig, metadata_session_timeout_s=args.metadata_session_timeout_s)
    if args.data_dir is not None:
        argv += ["--data-dir", args.data_dir]
    if args.replication is not None:
        argv += ["--replication", args.replication]
    argv += ["--store", args.store]
    if args.secure:
        argv.append("--secure")
    log_path = dev_state_path().with_suffix(".log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + DETACH_WAIT_S
    while True:
        text = log_path.read_text(errors="replace")
        if text.count("READY ") >= args.regions:  # each region says it is ready
            print(text, end="", flush=True)
            print(f"running in the background (pid {proc.pid}, log {log_path}); 'hedwig dev down'")
            return 0
        if proc.poll() is not None:
            print(text, end="", file=sys.stderr)
            return proc.returncode or 1
        if time.monotonic() > deadline:
            proc.terminate()
            return report(
                "dev up",
                UsageError(f"the cluster was not ready in {DETACH_WAIT_S:.0f} s (log {log_path})"),
            )
        time.sleep(0.1)


def _print_endpoints(cluster: DevCluster, state_path: Path) -> None:
    lines = [
        f"region      {cluster.region}  (replication {cluster.replication_setting})",
        f"{_store_label(cluster.zk):<11} {cluster.zk}",
    ]
    for i, h in enumerate(cluster.hub_procs):
        lines.append(f"hub {i:<7} {h.address}  metrics {h.metrics_url}/metrics")
    lines.append(f"data        {cluster.base_dir}")
    lines.append(f"state       {state_path}  (other hedwig commands find the cluster here)")
    print("\n".join(lines), flush=True)


def _store_label(url: str) -> str:
    """What the metadata store at ``url`` is, for the endpoint lines."""
    return "etcd" if url.startswith("etcd://") else "zookeeper"


def run_status(args: argparse.Namespace) -> int:
    try:
        state: dict[str, Any] = request(_socket(), {"op": "status"})["cluster"]
    except HedwigError as exc:
        return report("dev status", exc)
    if args.json:
        print(json.dumps(state, indent=2))
        return 0
    store = _store_label(str(state["zk"]))
    print(f"region {state['region']}, {store} {state['zk']}, data {state['data_dir']}")
    emit(state["hubs"], ["index", "address", "running", "metrics", "pid"], as_json=False)
    return 0


def run_control(args: argparse.Namespace) -> int:
    try:
        answer = request(_socket(), {"op": args.op, "hub": args.hub})
    except HedwigError as exc:
        return report(f"dev {args.op}", exc)
    if args.op == "down":
        # Return once it has stopped, so a ``dev up`` straight after finds its ports free.
        print("stopping the development cluster", flush=True)
        deadline = time.monotonic() + DETACH_WAIT_S
        while dev_state_path().exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        if dev_state_path().exists():
            return report("dev down", UsageError("the development cluster is still stopping"))
        print("stopped")
    else:
        state = "running" if answer.get("running") else "down"
        print(f"hub {answer.get('hub')}: {state}")
    return 0
