"""``hedwig dev up --regions N``: N linked regions on this machine, each with its own ZooKeeper
and hubs, linked all-to-all (``--region-links``, ``docs/operations.md`` "Linking regions").

The regions are named ``a``, ``b``, ``c``...; region i takes the ports of a single cluster
shifted by 200 * i (ZooKeeper 24000, 24200...; hubs 24001..., 24201...; metrics 24101...,
24301...) when free, else any: every port is chosen before any process starts, since each
region's links name the others' hubs. Each region prints its endpoints and then
``READY region=NAME hubs=H1,H2,... zk=...`` once its hubs answer. The state file names every
region: the client commands reach the one ``--region`` names (``hedwig pub --region b ...``),
the first without it; ``dev status``, ``dev kill`` and the other ``dev`` commands act on the
first. Plaintext only for now (``--secure`` is refused).
"""

from __future__ import annotations

import argparse
import signal
import string
import sys
import threading
from pathlib import Path

from hedwig.cli.common import dev_state_path, report
from hedwig.devcluster.cluster import DevCluster, port_free
from hedwig.devcluster.control import ControlServer, describe, write_state
from hedwig.devcluster.zookeeper import free_port
from hedwig.errors import HedwigError, UsageError

ZK_PORT = 24000
HUB_PORT = 24001
METRICS_PORT = 24101
PORTS_PER_REGION = 200


def region_names(n: int) -> list[str]:
    if not 2 <= n <= len(string.ascii_lowercase):
        raise UsageError(f"--regions is 2 to {len(string.ascii_lowercase)}, not {n}")
    return list(string.ascii_lowercase[:n])


def _port(preferred: int) -> int:
    return preferred if port_free(preferred) else free_port()


def linked_clusters(args: argparse.Namespace, base_dir: str | None) -> list[DevCluster]:
    """One development cluster per region, each linked to every other."""
    names = region_names(args.regions)
    zk_ports, hub_ports = {}, {}
    for i, name in enumerate(names):
        shift = PORTS_PER_REGION * i
        zk_ports[name] = _port(ZK_PORT + shift)
        hub_ports[name] = [
            (_port(HUB_PORT + shift + h), _port(METRICS_PORT + shift + h)) for h in range(args.hubs)
        ]
    endpoints = {n: ",".join(f"127.0.0.1:{p}" for p, _ in hub_ports[n]) for n in names}
    return [
        DevCluster(
            hubs=args.hubs,
            region=name,
            base_dir=str(Path(base_dir) / name) if base_dir else None,
            session_timeout_s=args.metadata_session_timeout_s,
            replication=args.replication,
            zk_port=zk_ports[name],
            hub_ports=hub_ports[name],
            store=args.store,
            hub_args=[
                "--region-links",
                ";".join(f"{o}={endpoints[o]}" for o in names if o != name),
            ],
        )
        for name in names
    ]


def run_regions(args: argparse.Namespace, socket_path: Path) -> int:
    """``dev up --regions N`` in the foreground, until Ctrl-C or ``dev down``."""
    if args.secure:
        return report("dev up", UsageError("--regions does not take --secure yet"))
    try:
        clusters = linked_clusters(args, args.data_dir)
    except UsageError as exc:
        return report("dev up", exc)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    started: list[DevCluster] = []
    state_path = dev_state_path()
    control: ControlServer | None = None
    try:
        for c in clusters:
            try:
                c.start()
            except HedwigError as exc:
                return report("dev up", exc)
            started.append(c)
            links = c.hub_args[1]
            print(f"region {c.region}  {c.zk}  links {links}", flush=True)
            for i, h in enumerate(c.hub_procs):
                print(f"  hub {i}  {h.address}  metrics {h.metrics_url}/metrics", flush=True)
            print(f"READY region={c.region} hubs={','.join(c.addresses)} zk={c.zk}", flush=True)
        first = clusters[0]

        def save() -> None:
            write_state(
                state_path,
                {**describe(first), "regions": {c.region: describe(c) for c in clusters}},
            )

        control = ControlServer(first, socket_path, save)
        save()
        control.start()
        print(
            f"state       {state_path}  (client commands: --region NAME; default {first.region})",
            flush=True,
        )
        while not done.wait(0.5) and not control.shutdown_requested.is_set():
            pass
    finally:
        if control is not None:
            control.close()
        for c in started:
            try:
                c.stop()
            except Exception as exc:  # stop the others whatever one does
                print(f"stopping region {c.region}: {exc}", file=sys.stderr, flush=True)
        if state_path.exists():
            state_path.unlink()
    return 0
