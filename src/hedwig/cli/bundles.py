"""``hedwig bundles``: the region's bundle map as the metadata store holds it, each bundle with
its owner (``docs/architecture.md``, "Bundles").

One read of the map and one listing of the owners, whatever the region holds: the listing
costs the bundles, never the topics. With ``--topic T`` it says which bundle ``T`` is in (and
its owner), for finding where a topic is served without asking any hub.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from hedwig.cli.common import add_json_option, add_metadata_options, report, resolve_metadata
from hedwig.cli.output import emit
from hedwig.errors import HedwigError
from hedwig.metadata import open_store
from hedwig.metadata.bundles import HASH_SPACE


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bundles", help="bundles: hash ranges of topics, owners")
    add_metadata_options(p)
    add_json_option(p)
    p.add_argument("--topic", help="only the bundle this topic is in")
    p.set_defaults(func=run_bundles)


async def collect_bundles(zk: str, region: str, topic: str | None) -> list[dict[str, Any]]:
    async with open_store(zk, region=region) as store:
        got = await store.bundles.read_bundle_map()
        if got is None:
            return []  # the region owns topics one by one (or no hub made the map yet)
        owners = await store.bundles.bundle_owners()
    bundles = got.value.bundles if topic is None else (got.value.bundle_of(topic),)
    return [
        {
            "bundle": b.name,
            "owner": owners[b.name].value.address if b.name in owners else "-",
            "share": f"{100 * b.width / HASH_SPACE:.3g}%",
            "generation": got.value.generation,
        }
        for b in bundles
    ]


def run_bundles(args: argparse.Namespace) -> int:
    try:
        rows = asyncio.run(collect_bundles(resolve_metadata(args), args.region, args.topic))
    except HedwigError as exc:
        return report(str(args.command), exc)
    emit(rows, ["bundle", "owner", "share", "generation"], as_json=args.json)
    return 0
