"""``hedwig ledgers``: every ledger of a region, and which ones are under-replicated."""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import sys
from typing import Any

from hedwig.cli.common import add_json_option, add_zk_options, report, resolve_zk
from hedwig.cli.output import emit
from hedwig.clock import SystemClock
from hedwig.errors import HedwigError
from hedwig.hub.config import HubConfig, parse_replication
from hedwig.hub.owning.peers import PeerDirectory
from hedwig.ledger.health import inspect
from hedwig.ledger.replicas import RemoteReplicas
from hedwig.metadata import open_store
from hedwig.metadata.records import LedgerState
from hedwig.net.transport import TCP, TcpNetwork
from hedwig.security.tls import client_context

# The hubs' defaults, which the notes on rows quote (a region may run with others).
_DEFAULTS = HubConfig()
REREPLICATION_DELAY_S = _DEFAULTS.rereplication_delay_s
AUDIT_INTERVAL_S = _DEFAULTS.audit_interval_s


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("ledgers", help="ledgers, their replicas and replication health")
    add_zk_options(p)
    p.add_argument("--under-replicated", action="store_true", help="only unhealthy ledgers")
    p.add_argument(
        "--replication",
        default="3/3/2",
        help="the region default the hubs run with (topics may override it); default 3/3/2",
    )
    add_json_option(p)
    g = p.add_argument_group(
        "secured regions",
        "Replicas of hubs with an internal listener are asked there, as a hub would: with a "
        "certificate from the region's hub CA (also HEDWIG_INTERNAL_CA, HEDWIG_INTERNAL_CERT, "
        "HEDWIG_INTERNAL_KEY, the hubs' own variables).",
    )
    g.add_argument("--hub-ca", help="the region's hub CA (PEM)")
    g.add_argument("--hub-cert", help="a certificate from it (PEM)")
    g.add_argument("--hub-key", help="its key (PEM)")
    p.set_defaults(func=run_ledgers)


def internal_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    ca = args.hub_ca or os.environ.get("HEDWIG_INTERNAL_CA")
    cert = args.hub_cert or os.environ.get("HEDWIG_INTERNAL_CERT")
    key = args.hub_key or os.environ.get("HEDWIG_INTERNAL_KEY")
    if not (ca or cert):
        return None
    return client_context(ca, cert=cert, key=key)


async def collect(
    zk: str, region: str, default_size: int, tls: ssl.SSLContext | None = None
) -> list[dict[str, Any]]:
    store = open_store(zk, region=region)
    # Ensembles name replicas by hub id; the directory finds each hub's storage role (its
    # internal listener if it publishes one, else its address).
    peers = PeerDirectory(store, SystemClock())
    replicas = RemoteReplicas(
        network=TcpNetwork(client_tls=tls) if tls is not None else TCP,
        resolve=peers.storage_address,
    )
    await store.start()
    try:
        hubs = [h for h in await store.hubs.list_hubs() if h.alive]
        alive = {h.storage_id for h in hubs} | {h.address for h in hubs}
        where = {h.storage_id: h.address for h in hubs if h.storage_id != h.address}

        def named(members: tuple[str, ...]) -> str:
            return ",".join(f"{m}@{where[m]}" if m in where else m for m in members)

        region_defaults = await store.topics.read_region_defaults()
        rows = []
        for lid in await store.ledgers.list_ledgers():
            got = await store.ledgers.read_ledger(lid)
            if got is None:
                continue
            md = got.value
            cfg = await store.topics.read_topic_config(md.topic)
            owner = await store.ownership.read_owner_info(md.topic)
            rep = (cfg.value.replication if cfg else None) or region_defaults.replication
            wanted = rep.ensemble if rep else default_size
            row: dict[str, Any] = {
                "ledger": lid,
                "topic": md.topic,
                "state": md.state.value,
                "replicas": named(md.fragments[-1][1]) if md.fragments else "",
                "quorums": f"{md.ensemble_size}/{md.write_quorum}/{md.ack_quorum}",
                "entries": md.last_entry_id + 1 if md.state is LedgerState.CLOSED else None,
                "bytes": md.length,
                "owner": owner.value.address if owner else None,
            }
            if md.state is LedgerState.CLOSED:
                health = await inspect(md, replicas, alive, wanted)
                row["under_replicated"] = health.under_replicated
                row["dead"] = ",".join(health.dead)
                row["lagging"] = ",".join(f"{a}({n})" for a, n in health.lagging.items())
                row["wanted"] = wanted
            else:
                dead = [a for _, e in md.fragments for a in e if a not in alive]
                row["under_replicated"] = bool(dead) or md.ensemble_size < wanted
                row["dead"] = ",".join(dead)
                row["lagging"] = ""
                row["wanted"] = wanted
            rows.append(row)
        return rows
    finally:
        replicas.close()
        await store.close()


def run_ledgers(args: argparse.Namespace) -> int:
    try:
        size = parse_replication(args.replication).ensemble
        rows = asyncio.run(collect(resolve_zk(args), args.region, size, internal_tls(args)))
    except HedwigError as exc:
        return report("ledgers", exc)
    if args.under_replicated:
        rows = [r for r in rows if r["under_replicated"]]
    for r in rows:
        r["expected"] = _expected(r) if r["under_replicated"] else None
    if not args.json:
        for r in rows:
            problems = [f"dead: {r['dead']}"] if r["dead"] else []
            problems += [f"behind: {r['lagging']}"] if r["lagging"] else []
            if len(r["replicas"].split(",")) < r["wanted"]:
                problems.append(f"wants {r['wanted']} replicas")
            r["health"] = "; ".join(problems) or "ok"
            r["size"] = _size(r["bytes"])
    cols = ["ledger", "topic", "state", "quorums", "entries", "size", "replicas", "health"]
    emit(rows, cols, as_json=args.json)
    if not args.json:
        # Right after a hub went or came back most rows are the repair's normal course: say
        # which, and when it ends, rather than leave them looking like data at risk.
        for told in sorted({r["expected"] for r in rows if r["expected"]}):
            print(f"note: {told}", file=sys.stderr)
    return 0


def _expected(row: dict[str, Any]) -> str | None:
    """What repairs ``row`` without anyone's help, and when (with the hubs' default
    settings); None if nothing will."""
    if row["dead"]:
        return (
            "a replica on a hub that is not alive: it is re-created on another hub "
            f"{REREPLICATION_DELAY_S:.0f} s after its hub went (--rereplication-delay), unless "
            "the hub comes back first and keeps it"
        )
    if row["state"] == LedgerState.OPEN.value and row["owner"] is None:
        return (
            "an open ledger of a topic nobody owns now (its owner went): the next hub to take "
            "the topic over, when a client next uses it, closes it and starts a full one"
        )
    if row["state"] == LedgerState.OPEN.value:
        return (
            "an open ledger made with fewer replicas than wanted, while a hub was down: its "
            f"owner rolls it over to a full ensemble at its next audit (every "
            f"{AUDIT_INTERVAL_S:.0f} s, --audit-interval) once enough hubs are alive"
        )
    if row["lagging"]:
        return (
            "a replica missed entries while its hub was away: the auditors copy them at their "
            f"next audit (every {AUDIT_INTERVAL_S:.0f} s once a hub is back)"
        )
    return None


def _size(n: int | None) -> str:
    if not n:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return str(n)
