"""Options shared by the client-side commands: where the hubs are."""

from __future__ import annotations

import argparse
import asyncio

from hedwig.errors import UsageError
from hedwig.metadata import open_store


def add_hub_options(p: argparse.ArgumentParser, *, zk_required: bool = False) -> None:
    p.add_argument("--hub", help="any hub's HOST:PORT (comma-separated for several)")
    p.add_argument("--zk", required=zk_required, help="ZooKeeper HOST:PORT, to find hubs")
    p.add_argument("--region", default="dev", help="region (default: dev, as hedwig dev up)")


async def alive_hubs(zk: str, region: str) -> list[str]:
    store = open_store(zk, region=region)
    await store.start()
    try:
        return [h.address for h in await store.hubs.list_hubs() if h.alive]
    finally:
        await store.close()


def resolve_hubs(args: argparse.Namespace) -> list[str]:
    if args.hub:
        return [h for h in args.hub.split(",") if h]
    if args.zk:
        hubs = asyncio.run(alive_hubs(args.zk, args.region))
        if not hubs:
            raise UsageError(f"no alive hub in region {args.region!r} at {args.zk}")
        return hubs
    raise UsageError("give --hub HOST:PORT or --zk HOST:PORT")
