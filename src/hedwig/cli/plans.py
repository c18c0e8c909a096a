"""``hedwig topic mode TOPIC single|fan-out|ingest [--hubs N]``: set how a topic is served.

Writes the topic's plan (``hedwig.metadata.plans``) with a compare-and-set, choosing the
delivery hubs by ``hedwig.placement.plans``; every hub serving the topic watches the plan and
its subscribers follow by themselves. Without the operator this is how a hot topic's
subscribers are spread over several hubs, or its publishers over several lanes
(``docs/operations.md``, "Hot topics").
"""

from __future__ import annotations

import argparse
import asyncio

from hedwig.cli.common import add_json_option, add_metadata_options, report, resolve_metadata
from hedwig.cli.output import emit
from hedwig.clock import SystemClock
from hedwig.errors import HedwigError
from hedwig.metadata import PlanMode, TopicPlan, open_store
from hedwig.placement.plans import set_topic_mode


def register_topic_mode(tsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    m = tsub.add_parser(
        "mode",
        help="serve a topic from one hub (single), spread its subscribers (fan-out) or its "
        "publishers (ingest)",
    )
    add_metadata_options(m)
    add_json_option(m)
    m.add_argument("topic")
    m.add_argument(
        "mode",
        choices=[p.value for p in PlanMode],
        help="single: the owner serves everything; fan-out: delivery hubs serve the "
        "subscribers; ingest: lanes, each with its own owner, take the publishers",
    )
    m.add_argument(
        "--hubs",
        type=int,
        default=2,
        help="fan-out: how many delivery hubs (default 2; the owner only if too few others); "
        "ingest: how many open lanes (default 2; fewer seals the newest)",
    )
    m.add_argument("--reason", default="set by hand", help="why, kept with the plan")
    m.set_defaults(func=run_topic_mode)


def run_topic_mode(args: argparse.Namespace) -> int:
    async def go() -> TopicPlan:
        async with open_store(resolve_metadata(args), region=args.region) as store:
            return await set_topic_mode(
                store,
                args.topic,
                PlanMode(args.mode),
                hubs=args.hubs,
                reason=args.reason,
                clock=SystemClock(),
            )

    try:
        plan = asyncio.run(go())
    except HedwigError as exc:
        return report("topic mode", exc)
    row = {
        "topic": args.topic,
        "mode": plan.mode.value,
        "hubs": ",".join(plan.hubs),
        "lanes": describe_lanes(plan),
        "generation": plan.generation,
    }
    emit([row], ["topic", "mode", "hubs", "lanes", "generation"], as_json=args.json)
    return 0


def describe_lanes(plan: TopicPlan) -> str:
    """``0,1,2 (3 sealed)``: the open lanes, then those sealed and still kept."""
    if not plan.lanes:
        return ""
    open_ = ",".join(str(i) for i in plan.open_lanes)
    sealed = [str(lane.index) for lane in plan.lanes if lane.sealed]
    return open_ + (f" ({','.join(sealed)} sealed)" if sealed else "")
