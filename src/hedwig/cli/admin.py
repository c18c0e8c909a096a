"""``hedwig topics`` and ``hedwig hubs``: what the metadata store says about the region, and
for each topic what its owner says of its bounds (asked with the command's TLS and credentials,
as ``pub`` and ``sub`` ask; where it cannot be asked the listing says so and shows the store's
figures). ``hedwig topics`` lists a page with ``--limit`` and ``--after``; in a region owning
topics by bundle, a topic's owner is its bundle's (one listing of the bundles' owners, no read
per topic)."""

from __future__ import annotations

import argparse
import asyncio
import bisect
import sys
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from hedwig.cli.common import (
    add_json_option,
    add_metadata_options,
    add_security_options,
    client_security,
    report,
    resolve_metadata,
)
from hedwig.cli.output import Progress, emit
from hedwig.cli.plans import describe_lanes
from hedwig.errors import HedwigError, UsageError
from hedwig.metadata import PlanMode, open_store
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import HubInfo, Versioned
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TCP, TcpNetwork
from hedwig.protocol import TopicInfo, TopicStats
from hedwig.security.credentials import ClientSecurity

LISTING_CONCURRENCY = 32


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, func, text in (
        ("topics", run_topics, "topics: owner, mode, subscribers, backlog"),
        ("hubs", run_hubs, "hubs: alive, topics, load"),
    ):
        p = sub.add_parser(name, help=text)
        add_metadata_options(p)
        add_json_option(p)
        if name == "topics":
            # The owners are asked for their topics' bounds as pub and sub reach them.
            add_security_options(p)
            # A page of a large region: at most --limit topics, the first after --after.
            p.add_argument("--limit", type=int, help="at most this many topics (default: all)")
            p.add_argument("--after", help="only topics after this one (the last of a page)")
        p.set_defaults(func=func)


class _Owners:
    """Asks owners for their topics' bounds with the command's TLS and credentials (as
    ``pub`` and ``sub`` reach them), one connection per owner, and keeps why one could not be
    asked, so the listing can say whose figures are the store's."""

    def __init__(self, security: ClientSecurity) -> None:
        self._network = TcpNetwork(client_tls=security.tls) if security.tls is not None else TCP
        self._credentials = security.credentials
        self._conns: dict[str, asyncio.Task[HubConnection]] = {}
        self.failures: dict[str, str] = {}

    async def info(self, owner: str, topic: str) -> TopicInfo | None:
        """The owner's answer, without ever making anyone claim the topic; None, and the
        reason kept, if it could not be had."""
        task = self._conns.get(owner)
        if task is None:
            task = self._conns[owner] = asyncio.ensure_future(
                HubConnection.open(
                    owner, network=self._network, timeout=2, credentials=self._credentials
                )
            )
        try:
            conn = await asyncio.shield(task)
            # Not redirected: a hub that no longer owns the topic redirects instead of
            # claiming, unless it chooses itself, which is a claim the topic would get on
            # first use anyway.
            answer = await conn.request(
                TopicStats(request_id=conn.next_id(), topic=topic, redirected=False), timeout=3
            )
        except HedwigError as exc:
            self.failures.setdefault(owner, str(exc))
            return None
        return answer if isinstance(answer, TopicInfo) else None

    async def close(self) -> None:
        for task in self._conns.values():
            if task.done() and not task.cancelled() and task.exception() is None:
                task.result().close()
            else:
                task.cancel()


async def _owner_lookup(
    store: MetadataStore,
) -> Callable[[str], Awaitable[Versioned[HubInfo] | None]]:
    """How a topic's owner record is found: its bundle's, from one listing, in a region with
    a bundle map; its own, read for each topic, in one without."""
    found = await store.bundles.read_bundle_map()
    if found is None:
        return store.ownership.read_owner_info
    bundles, by_bundle = found.value, await store.bundles.bundle_owners()

    async def of_bundle(topic: str) -> Versioned[HubInfo] | None:
        return by_bundle.get(bundles.bundle_of(topic).name)

    return of_bundle


async def collect_topics(
    zk: str,
    region: str,
    security: ClientSecurity | None = None,
    *,
    limit: int | None = None,
    after: str | None = None,
) -> list[dict[str, Any]]:
    """One row per topic, in name order: at most ``limit``, those after ``after`` (a page:
    the next one starts after the last topic of this one). Topics are read concurrently (a
    region holds many; each row is a few metadata reads and a question to the owner), with
    progress on a terminal. A topic whose owner could not be asked has the store's figures
    (``source``: ``store``), which lag the owner's by up to a ledger; stderr says so, and why.
    In a region owning topics by bundle, a topic's owner is its bundle's."""
    if limit is not None and limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    owners = _Owners(security or ClientSecurity())
    store = open_store(zk, region=region)
    await store.start()
    progress = Progress()
    try:
        topics = sorted(await store.topics.list_topics())
        if after is not None:
            topics = topics[bisect.bisect_right(topics, after) :]
        if limit is not None:
            topics = topics[:limit]
        owner_of = await _owner_lookup(store)
        at_once = asyncio.Semaphore(LISTING_CONCURRENCY)
        done = 0

        async def row(topic: str) -> dict[str, Any]:
            nonlocal done
            async with at_once:
                owner = await owner_of(topic)
                subs = await store.subscriptions.read_subscriptions(topic)
                ranges = await store.persistence.read_topic_persistence_info(topic)
                plan = await store.plans.read_plan(topic)
                info = await owners.info(owner.value.address, topic) if owner else None
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
                # The store's last_seq lags the owner's: a mark past it is no backlog.
                "backlog": max((max(0, last - m) for m in marks), default=0),
                "source": "owner" if info is not None else "store",
                "ledgers": len(ranges.value.ranges) if ranges else 0,
            }

        rows = list(await asyncio.gather(*(row(t) for t in topics)))
    finally:
        progress.done()
        await owners.close()
        await store.close()
    for owner, why in sorted(owners.failures.items()):
        print(
            f"hedwig topics: could not ask owner {owner} ({why}); LAST_SEQ and BACKLOG of its "
            "topics are the metadata store's, which lag (give the credentials pub and sub "
            "use: --tls-ca, --cert/--cert-key, --token-file or HEDWIG_*)",
            file=sys.stderr,
        )
    return rows


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
                "msg_in": round(h.load.msg_in, 1) if h.load else 0.0,
                "msg_out": round(h.load.msg_out, 1) if h.load else 0.0,
                "connections": h.load.connections if h.load else 0,
                "report_age_s": round((now - h.load.timestamp_ms) / 1000, 1) if h.load else None,
            }
            for h in await store.hubs.list_hubs()
        ]
    finally:
        await store.close()


Collect = Callable[[str, str, ClientSecurity], Coroutine[Any, Any, list[dict[str, Any]]]]


async def _hubs(zk: str, region: str, _: ClientSecurity) -> list[dict[str, Any]]:
    return await collect_hubs(zk, region)


def _run(args: argparse.Namespace, collect: Collect, columns: list[str]) -> int:
    try:
        rows = asyncio.run(collect(resolve_metadata(args), args.region, client_security(args)))
    except HedwigError as exc:
        return report(str(args.command), exc)
    emit(rows, columns, as_json=args.json)
    return 0


def run_topics(args: argparse.Namespace) -> int:
    async def collect(zk: str, region: str, security: ClientSecurity) -> list[dict[str, Any]]:
        return await collect_topics(zk, region, security, limit=args.limit, after=args.after)

    return _run(
        # MODE last: scripts that split the table by position keep working.
        args,
        collect,
        ["topic", "owner", "subscribers", "last_seq", "backlog", "mode"],
    )


def run_hubs(args: argparse.Namespace) -> int:
    return _run(args, _hubs, ["hub", "alive", "topics", "msg_in", "msg_out", "connections"])
