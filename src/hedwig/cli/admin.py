"""``hedwig topics`` and ``hedwig hubs``: what ZooKeeper says about the region."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable, Coroutine
from typing import Any

from hedwig.cli.common import add_json_option, add_zk_options, report, resolve_zk
from hedwig.cli.output import Progress, emit
from hedwig.cli.plans import describe_lanes
from hedwig.errors import HedwigError
from hedwig.metadata import PlanMode, open_store
from hedwig.net.connection import HubConnection
from hedwig.protocol import TopicInfo, TopicStats

LISTING_CONCURRENCY = 32


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, func, text in (
        ("topics", run_topics, "topics: owner, mode, subscribers, backlog"),
        ("hubs", run_hubs, "hubs: alive, topics, load"),
    ):
        p = sub.add_parser(name, help=text)
        add_zk_options(p)
        add_json_option(p)
        p.set_defaults(func=func)


async def _topic_info(owner: str, topic: str) -> TopicInfo | None:
    """Ask the owner for the topic's bounds, without ever making anyone claim it."""
    try:
        conn = await HubConnection.open(owner, timeout=2)
    except HedwigError:
        return None
    try:
        # Not redirected: a hub that no longer owns the topic redirects instead of claiming,
        # unless it chooses itself, which is a claim the topic would get on first use anyway.
        answer = await conn.request(
            TopicStats(request_id=conn.next_id(), topic=topic, redirected=False), timeout=3
        )
        return answer if isinstance(answer, TopicInfo) else None
    except HedwigError:
        return None
    finally:
        conn.close()


async def collect_topics(zk: str, region: str) -> list[dict[str, Any]]:
    """One row per topic. Topics are read concurrently (a region holds many; each row is a few
    metadata reads and a question to the owner), with progress on a terminal."""
    store = open_store(zk, region=region)
    await store.start()
    progress = Progress()
    try:
        topics = sorted(await store.topics.list_topics())
        limit = asyncio.Semaphore(LISTING_CONCURRENCY)
        done = 0

        async def row(topic: str) -> dict[str, Any]:
            nonlocal done
            async with limit:
                owner = await store.ownership.read_owner_info(topic)
                subs = await store.subscriptions.read_subscriptions(topic)
                ranges = await store.persistence.read_topic_persistence_info(topic)
                plan = await store.plans.read_plan(topic)
                info = await _topic_info(owner.value.address, topic) if owner else None
            done += 1
            progress.show(f"reading topics: {done}/{len(topics)}")
            marks = [s.value.state.consumed_seq for s in subs.values() if s.value.state]
            last = info.last_seq if info is not None else ranges.value.last_seq if ranges else 0
            return {
                "topic": topic,
                "owner": owner.value.address if owner else None,
                "mode": plan.value.mode.value if plan else PlanMode.SINGLE.value,
                # fan-out: the delivery hubs the plan names; and the plan's generation.
                "hubs": list(plan.value.hubs) if plan else [],
                "plan_generation": plan.value.generation if plan else 0,
                # ingest: the open lanes, then those sealed and kept for their readers (each
                # lane is listed as a topic of its own too, ``TOPIC~laneN``).
                "lanes": describe_lanes(plan.value) if plan else "",
                "subscribers": len(subs),
                "last_seq": last,
                "backlog": max((last - m for m in marks), default=0),
                "ledgers": len(ranges.value.ranges) if ranges else 0,
            }

        return list(await asyncio.gather(*(row(t) for t in topics)))
    finally:
        progress.done()
        await store.close()


async def collect_hubs(zk: str, region: str) -> list[dict[str, Any]]:
    store = open_store(zk, region=region)
    await store.start()
    try:
        now = int(time.time() * 1000)
        return [
            {
                "hub": h.address,
                "alive": h.alive,
                "topics": h.load.topics if h.load else 0,
                "msg_in": h.load.msg_in if h.load else 0.0,
                "msg_out": h.load.msg_out if h.load else 0.0,
                "connections": h.load.connections if h.load else 0,
                "report_age_s": round((now - h.load.timestamp_ms) / 1000, 1) if h.load else None,
            }
            for h in await store.hubs.list_hubs()
        ]
    finally:
        await store.close()


Collect = Callable[[str, str], Coroutine[Any, Any, list[dict[str, Any]]]]


def _run(args: argparse.Namespace, collect: Collect, columns: list[str]) -> int:
    try:
        rows = asyncio.run(collect(resolve_zk(args), args.region))
    except HedwigError as exc:
        return report(str(args.command), exc)
    emit(rows, columns, as_json=args.json)
    return 0


def run_topics(args: argparse.Namespace) -> int:
    return _run(
        # MODE last: scripts that split the table by position keep working.
        args,
        collect_topics,
        ["topic", "owner", "subscribers", "last_seq", "backlog", "mode"],
    )


def run_hubs(args: argparse.Namespace) -> int:
    return _run(args, collect_hubs, ["hub", "alive", "topics", "msg_in", "msg_out", "connections"])
