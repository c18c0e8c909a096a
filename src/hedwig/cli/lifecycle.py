"""``hedwig topic describe|delete``, ``hedwig subscription create|delete|reset`` and
``hedwig subscriptions``:
a topic's and its subscriptions' life, through the hubs (the owner does the work)."""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from hedwig.cli.common import (
    add_hub_options,
    add_json_option,
    client_security,
    report,
    resolve_hubs,
)
from hedwig.cli.output import emit
from hedwig.cli.plans import register_topic_mode
from hedwig.cli.policy import Policy, add_policy_options, policy_from
from hedwig.cli.topic_config import register_topic_config
from hedwig.client import HedwigClient
from hedwig.errors import HedwigError, UsageError
from hedwig.metadata.records.queueing import parse_duration_ms
from hedwig.protocol import ResetTo, SubscribeMode

T = TypeVar("T")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("topic", help="a topic: create, config, describe, delete, mode")
    tsub = p.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    d = tsub.add_parser(
        "describe", help="a topic's owner, kept sequence ids and subscriptions (creates nothing)"
    )
    add_hub_options(d)
    add_json_option(d)
    d.add_argument("topic")
    d.set_defaults(func=run_topic_describe)
    d = tsub.add_parser("delete", help="delete a topic: its messages, ledgers and subscriptions")
    add_hub_options(d)
    d.add_argument("topic")
    d.add_argument(
        "--force", action="store_true", help="even while subscribers are attached (they stop)"
    )
    d.set_defaults(func=run_topic_delete)
    register_topic_mode(tsub)
    register_topic_config(tsub)

    p = sub.add_parser("subscription", help="a subscription: create, delete, reset")
    ssub = p.add_subparsers(dest="subscription_command", required=True, metavar="ACTION")
    c = _subscription_action(
        ssub, "create", "create a subscription now: it receives what is published from here on"
    )
    start = c.add_mutually_exclusive_group()
    start.add_argument(
        "--earliest",
        action="store_true",
        help="start at the first kept message instead (what was published before is delivered)",
    )
    add_time_options(start, "start at")
    add_policy_options(c)
    c.set_defaults(func=run_subscription_create)
    d = _subscription_action(ssub, "delete", "delete a subscription and its consume mark")
    d.set_defaults(func=run_subscription_delete)
    r = _subscription_action(
        ssub,
        "reset",
        "move a subscription: delivery restarts at a sequence id, the earliest or the end",
    )
    where = r.add_mutually_exclusive_group(required=True)
    where.add_argument("--to", type=int, metavar="SEQ", help="delivery restarts at SEQ")
    where.add_argument("--earliest", action="store_true", help="at the first kept message")
    where.add_argument("--latest", action="store_true", help="after the last message")
    add_time_options(where, "at")
    r.set_defaults(func=run_subscription_reset)

    p = sub.add_parser(
        "subscriptions",
        help="a topic's subscriptions: type, position, backlog, consumers, unacknowledged, "
        "redelivered, oldest unacknowledged, last used",
    )
    add_hub_options(p)
    add_json_option(p)
    p.add_argument("topic")
    p.set_defaults(func=run_subscriptions)


def add_time_options(group: argparse._MutuallyExclusiveGroup, at: str) -> None:
    """``--time`` and ``--since``: a position by publish time."""
    group.add_argument(
        "--time",
        metavar="ISO-8601",
        help=f"{at} the first message published at this time or later (e.g. "
        "2026-12-02T10:00:00Z; a time without a zone is UTC)",
    )
    group.add_argument(
        "--since",
        metavar="DURATION",
        help=f"{at} the first message published this long ago or later (e.g. 10m, 2h)",
    )


def start_position(args: argparse.Namespace) -> ResetTo | int | datetime | None:
    """Where ``--earliest``, ``--latest``, ``--to``, ``--time`` or ``--since`` put delivery
    (``None``: none was given)."""
    if args.time is not None:
        try:
            when = datetime.fromisoformat(args.time)
        except ValueError as exc:
            raise UsageError(f"--time {args.time!r} is not an ISO-8601 time: {exc}") from None
        return when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    if args.since is not None:
        return datetime.now(UTC) - timedelta(milliseconds=parse_duration_ms(args.since))
    if args.earliest:
        return ResetTo.EARLIEST
    if getattr(args, "latest", False):
        return ResetTo.LATEST
    to: int | None = getattr(args, "to", None)
    return to


def _subscription_action(
    ssub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_: str
) -> argparse.ArgumentParser:
    """``hedwig subscription NAME``, with the hub options and the subscription it acts on."""
    p = ssub.add_parser(name, help=help_)
    add_hub_options(p)
    p.add_argument("topic")
    p.add_argument("subscriber")
    return p


def _client(hubs: list[str], args: argparse.Namespace) -> HedwigClient:
    return HedwigClient(hubs, security=client_security(args))


def _on_client(args: argparse.Namespace, act: Callable[[HedwigClient], Awaitable[T]]) -> T:
    """``act`` done with a client of the hubs ``args`` name (``HedwigError`` as it comes)."""
    hubs = resolve_hubs(args)

    async def go() -> T:
        async with _client(hubs, args) as client:
            return await act(client)

    return asyncio.run(go())


def run_topic_describe(args: argparse.Namespace) -> int:
    async def go() -> dict[str, object]:
        async with _client(hubs, args) as client:
            d = await client.describe_topic(args.topic)
            owner = client.router.owner_of(args.topic)
        return {
            "topic": args.topic,
            "owner": owner,
            "first_seq": d.first_available,
            "last_seq": d.last_seq,
            "messages": max(0, d.last_seq - d.first_available + 1),
            "subscriptions": len(d.subscriptions),
            "attached": sum(1 for s in d.subscriptions if s.attached),
        }

    try:
        hubs = resolve_hubs(args)
        row = asyncio.run(go())
    except HedwigError as exc:
        return report("topic describe", exc)
    if args.json:
        print(json.dumps(row))
    else:
        width = max(len(k) for k in row)
        for k, v in row.items():
            print(f"{k:<{width}}  {'-' if v is None else v}")
    return 0


def run_topic_delete(args: argparse.Namespace) -> int:
    try:
        _on_client(args, lambda client: client.delete_topic(args.topic, force=args.force))
    except HedwigError as exc:
        return report("topic delete", exc)
    print(f"deleted topic {args.topic}")
    return 0


async def create_subscription(
    client: HedwigClient,
    topic: str,
    subscriber: str,
    *,
    earliest: bool = False,
    start: ResetTo | int | datetime | None = None,
    policy: Policy | None = None,
) -> int | None:
    """Create the subscription (``SubscriptionExistsError`` if it exists); with ``earliest``
    (or a ``start``: a position, a publish time) move it there at once, and return its consume
    mark then.

    Two requests (a create, a reset), not one: the protocol's SUBSCRIBE starts a new
    subscription at the end. Between them it is at the end, attached by nobody, so nothing is
    delivered from there, and the reset covers all that is kept by then."""
    if policy is not None:
        await client.create_subscription(
            topic,
            subscriber,
            type=policy.type,
            ack_timeout=policy.ack_timeout_s,
            max_deliveries=policy.max_deliveries,
            backoff=policy.backoff_s,
            dead_letter=policy.dead_letter,
            delay=policy.delay_s,
        )
    else:
        sub = await client.subscribe(topic, subscriber, mode=SubscribeMode.CREATE)
        await sub.close()
    if earliest:
        start = ResetTo.EARLIEST
    if start is None:
        return None
    return await client.reset_subscription(topic, subscriber, start)


def run_subscription_create(args: argparse.Namespace) -> int:
    try:
        policy = policy_from(args)
        mark = _on_client(
            args,
            lambda client: create_subscription(
                client, args.topic, args.subscriber, start=start_position(args), policy=policy
            ),
        )
    except HedwigError as exc:
        return report("subscription create", exc)
    first = ", the first kept message" if args.earliest else ""
    told = f": delivery starts at {mark + 1}{first}" if mark is not None else ""
    print(f"created subscription {args.subscriber} of {args.topic}{told}")
    return 0


def run_subscription_delete(args: argparse.Namespace) -> int:
    try:
        _on_client(args, lambda client: client.unsubscribe(args.topic, args.subscriber))
    except HedwigError as exc:
        return report("subscription delete", exc)
    print(f"deleted subscription {args.subscriber} of {args.topic}")
    return 0


def run_subscription_reset(args: argparse.Namespace) -> int:
    try:
        to = start_position(args)
        assert to is not None  # (argparse: one of them is required)
        mark = _on_client(
            args, lambda client: client.reset_subscription(args.topic, args.subscriber, to)
        )
    except HedwigError as exc:
        return report("subscription reset", exc)
    print(f"subscription {args.subscriber} of {args.topic}: delivery restarts at {mark + 1}")
    return 0


# ``hedwig subscriptions``' columns: the position (TOPIC_DESCRIPTION), then the queue's state
# as its owner serves it (DESCRIBE_QUEUES: 0 for a subscription nobody attached to there).
SUBSCRIPTION_COLUMNS = [
    "subscription",
    "type",
    "position",
    "backlog",
    "attached",
    "consumers",
    "unacked",
    "redelivered",
    "dropped",
    "oldest_unacked_s",
    "idle_s",
]


def run_subscriptions(args: argparse.Namespace) -> int:
    async def go() -> list[dict[str, object]]:
        async with _client(hubs, args) as client:
            d = await client.describe_topic(args.topic)
            queues = {q.name: q for q in await client.describe_queues(args.topic)}
        now = time.time() * 1000
        rows: list[dict[str, object]] = []
        for s in d.subscriptions:
            q = queues.get(s.name)
            rows.append(
                {
                    "subscription": s.name,
                    "type": q.type.label if q else None,
                    "position": s.consumed_seq,
                    "backlog": max(0, d.last_seq - s.consumed_seq),
                    "attached": s.attached,
                    "consumers": q.consumers if q else None,
                    "unacked": q.unacked if q else None,
                    "redelivered": q.redelivered if q else None,
                    "dropped": q.dropped if q else None,
                    "oldest_unacked_s": round(q.oldest_unacked_ms / 1000, 1) if q else None,
                    "idle_s": round((now - s.last_active_ms) / 1000) if s.last_active_ms else None,
                }
            )
        return rows

    try:
        hubs = resolve_hubs(args)
        rows = asyncio.run(go())
    except HedwigError as exc:
        return report("subscriptions", exc)
    emit(rows, SUBSCRIPTION_COLUMNS, as_json=args.json)
    return 0
