"""``hedwig links``: the region's links to other regions and how replication from each stands,
one row per hub and linked region (each hub replicates the topics it owns): the linked region,
its endpoints, the topics the hub replicates from it, their lag in messages and seconds, and
the messages the hub applied from it since it started (``DESCRIBE_LINKS``,
``docs/operations.md`` "Linking regions")."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from hedwig.cli.common import (
    add_hub_options,
    add_json_option,
    client_security,
    report,
    resolve_hubs,
)
from hedwig.cli.output import emit
from hedwig.client import HedwigClient
from hedwig.errors import HedwigError

COLUMNS = ["hub", "region", "linked", "topics", "lag", "lag_s", "replicated", "endpoints"]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("links", help="links to other regions: lag and replication per hub")
    add_hub_options(p)
    add_json_option(p)
    p.set_defaults(func=run_links)


async def collect(hubs: list[str], client: HedwigClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for hub in hubs:
        got = await client.describe_links(hub)
        for linked, endpoints, topics, lag, lag_ms, replicated in zip(
            got.regions,
            got.endpoints,
            got.topics,
            got.lag_messages,
            got.lag_ms,
            got.replicated,
            strict=True,
        ):
            rows.append(
                {
                    "hub": hub,
                    "region": got.region,
                    "linked": linked,
                    "topics": topics,
                    "lag": lag,
                    "lag_s": round(lag_ms / 1000, 3),
                    "replicated": replicated,
                    "endpoints": endpoints,
                }
            )
    return rows


def run_links(args: argparse.Namespace) -> int:
    async def go(hubs: list[str]) -> list[dict[str, Any]]:
        async with HedwigClient(hubs, security=client_security(args)) as client:
            return await collect(hubs, client)

    try:
        rows = asyncio.run(go(resolve_hubs(args)))
    except HedwigError as exc:
        return report("links", exc)
    emit(rows, COLUMNS, as_json=args.json)
    return 0
