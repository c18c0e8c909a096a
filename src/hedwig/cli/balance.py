"""``hedwig move`` and ``hedwig rebalance``: move topics (or, in a region owning topics by
bundle, bundles) by hand, or topics by the shared policy."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, replace

from hedwig.cli.common import (
    add_hub_options,
    add_json_option,
    add_metadata_options,
    add_security_options,
    alive_hubs,
    client_security,
    report,
    resolve_hubs,
    resolve_metadata,
)
from hedwig.cli.output import Progress
from hedwig.client import HedwigClient
from hedwig.errors import HedwigError, ServiceUnavailableError, UsageError
from hedwig.metadata import open_store
from hedwig.placement.rebalance import Move, RebalanceConfig, Rebalancer
from hedwig.security import ClientSecurity


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "move",
        help="hand a topic over gracefully (to --to, or wherever placed), or a bundle (--bundle)",
    )
    add_hub_options(p)
    p.add_argument("topic", nargs="?", help="the topic (not with --bundle)")
    p.add_argument("--to", default=None, help="destination hub HOST:PORT (needed with --bundle)")
    p.add_argument(
        "--bundle",
        help="hand this bundle (a name `hedwig bundles` lists, e.g. 00000000_0fffffff) with "
        "every topic of it to --to, in a region owning topics by bundle (super-users only)",
    )
    p.set_defaults(func=run_move)

    p = sub.add_parser("rebalance", help="propose (--dry-run) or apply topic moves by the policy")
    add_metadata_options(p)
    add_security_options(p)
    p.add_argument("--dry-run", action="store_true", help="print the moves, change nothing")
    p.add_argument("--margin", type=float, default=0.2, help="overload margin over the mean")
    p.add_argument("--max-moves", type=int, default=10)
    p.add_argument("--min-topic-rate", type=float, default=1.0)
    add_json_option(p)
    p.set_defaults(func=run_rebalance)


def run_move(args: argparse.Namespace) -> int:
    if args.bundle is not None:
        return run_move_bundle(args)
    if args.topic is None:
        return report("move", UsageError("name a topic, or a bundle with --bundle"))
    try:
        hubs = resolve_hubs(args)

        async def go() -> None:
            async with HedwigClient(hubs, security=client_security(args)) as client:
                await client.move_topic(args.topic, args.to, reason="moved by hand")

        asyncio.run(go())
    except HedwigError as exc:
        return report("move", exc)
    print(f"handed {args.topic} over" + (f" to {args.to}" if args.to else ""))
    return 0


def run_move_bundle(args: argparse.Namespace) -> int:
    """``hedwig move --bundle B --to H``: sent to B's owner as the store names it."""
    if args.topic is not None or not args.to:
        return report(
            "move", UsageError("--bundle moves a bundle to a named hub: --bundle B --to H")
        )

    async def go() -> str:
        async with open_store(resolve_metadata(args), region=args.region) as store:
            owner = (await store.bundles.bundle_owners()).get(args.bundle)
            alive = [h.address for h in await store.hubs.list_hubs() if h.alive]
        # Its owner, as the store says; owned by nobody, any hub, which says why (not a
        # bundle of the map, or placed at its topics' next request).
        address = owner.value.address if owner is not None else next(iter(alive), None)
        if address is None:
            raise ServiceUnavailableError(f"no hub of region {args.region!r} is alive")
        async with HedwigClient([address], security=client_security(args)) as client:
            await client.move_bundle(args.bundle, args.to, owner=address, reason="moved by hand")
        return address

    try:
        source = asyncio.run(go())
    except HedwigError as exc:
        return report("move", exc)
    print(f"handed bundle {args.bundle} from {source} to {args.to}")
    return 0


async def plan_and_apply(
    zk: str,
    region: str,
    config: RebalanceConfig,
    *,
    dry_run: bool,
    progress: Progress | None = None,
    security: ClientSecurity | None = None,
) -> list[Move]:
    store = open_store(zk, region=region)
    await store.start()
    try:
        hubs = await store.hubs.list_hubs()
    finally:
        await store.close()
    # A one-off run has no history to confirm with: it acts on what the reports show now.
    moves = Rebalancer(replace(config, confirmations=1)).plan(hubs)
    if not dry_run and moves:
        async with HedwigClient(await alive_hubs(zk, region), security=security) as client:
            for i, m in enumerate(moves, 1):
                if progress is not None:
                    progress.show(
                        f"moving {i}/{len(moves)}: {m.topic} -> {m.destination}", force=True
                    )
                await client.move_topic(m.topic, m.destination, reason=m.reason, kind=m.kind)
    if progress is not None:
        progress.done()
    return moves


def run_rebalance(args: argparse.Namespace) -> int:
    config = RebalanceConfig(
        overload_margin=args.margin,
        max_moves_per_cycle=args.max_moves,
        min_topic_rate=args.min_topic_rate,
        confirmations=1,
    )
    try:
        zk = resolve_metadata(args)
        moves = asyncio.run(
            plan_and_apply(
                zk,
                args.region,
                config,
                dry_run=args.dry_run,
                progress=Progress(),
                security=client_security(args),
            )
        )
    except HedwigError as exc:
        return report("rebalance", exc)
    if args.json:
        print(json.dumps([asdict(m) for m in moves], indent=2))
    elif not moves:
        print("balanced: no moves")
    else:
        verb = "would move" if args.dry_run else "moved"
        for m in moves:
            print(f"{verb} {m.topic}: {m.source} -> {m.destination}  ({m.reason})")
    return 0
