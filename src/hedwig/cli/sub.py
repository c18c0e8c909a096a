"""``hedwig sub``: print a topic's messages, through a subscription or by peeking.

With a subscriber name the command attaches to (or creates) that subscription, prints each
message and consumes it, so the next run goes on where this one stopped. With ``--peek`` it
reads by sequence id instead (``--from``, default the first kept message): nothing is created or
consumed. Each message prints as ``SEQ<TAB>VALUE`` (``LANE:SEQ`` for a message of a topic's lane
other than 0); ``--print`` adds fields before the value
(``timestamp``, ``publisher``, ``key``, ``headers``), ``--json`` prints a JSON object per line.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import datetime as dt
import json
import sys
from typing import Any

from hedwig.cli.common import add_hub_options, client_security, report, resolve_hubs
from hedwig.cli.lifecycle import create_subscription
from hedwig.client import DeliveredMessage, HedwigClient, SubscribeMode
from hedwig.errors import (
    DeadlineExceededError,
    ForbiddenError,
    HedwigError,
    NoSuchTopicError,
    SubscriptionExistsError,
    UsageError,
)

MODES = {
    "create": SubscribeMode.CREATE,
    "attach": SubscribeMode.ATTACH,
    "create-or-attach": SubscribeMode.CREATE_OR_ATTACH,
}
FIELDS = ("timestamp", "publisher", "key", "headers")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sub",
        help="print a topic's messages (SEQ<TAB>VALUE), through a subscription or --peek",
        description=__doc__.split("\n\n")[1] if __doc__ else None,
    )
    add_hub_options(p)
    p.add_argument("topic")
    p.add_argument("subscriber", nargs="?", help="the subscription (not with --peek)")
    p.add_argument("--mode", choices=list(MODES), default="create-or-attach")
    p.add_argument("--count", type=int, default=None, help="exit after this many messages")
    p.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="exit after this many seconds without a message (default: wait for ever)",
    )
    p.add_argument(
        "--earliest",
        action="store_true",
        help="a subscription this creates starts at the first kept message, not at the end "
        "(an existing one goes on where it is)",
    )
    p.add_argument(
        "--force-attach",
        action="store_true",
        help="take the subscription over from the process attached to it (that one is closed)",
    )
    p.add_argument("--window", type=int, default=1000, help="message window (flow control)")
    p.add_argument(
        "--peek",
        action="store_true",
        help="read without a subscription: nothing is created or consumed",
    )
    p.add_argument(
        "--from",
        dest="from_seq",
        type=int,
        default=0,
        help="with --peek: the first sequence id (default: the first kept message)",
    )
    p.add_argument(
        "--print",
        dest="fields",
        default="",
        help=f"fields to print before the value, comma-separated: {','.join(FIELDS)}",
    )
    p.add_argument("--json", action="store_true", help="a JSON object per message")
    p.set_defaults(func=run_sub)


def run_sub(args: argparse.Namespace) -> int:
    try:
        fields = [f for f in args.fields.split(",") if f]
        unknown = set(fields) - set(FIELDS)
        if unknown:
            raise UsageError(f"--print takes {','.join(FIELDS)}; not {','.join(sorted(unknown))}")
        if args.peek == (args.subscriber is not None):
            raise UsageError("give a subscriber name, or --peek (not both)")
        hubs = resolve_hubs(args)
        return asyncio.run(_peek(hubs, args, fields) if args.peek else _sub(hubs, args, fields))
    except HedwigError as exc:
        return report("sub", exc)


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def _line(msg: DeliveredMessage, topic: str, fields: list[str], as_json: bool) -> str:
    m = msg.message
    if as_json:
        obj: dict[str, Any] = {
            "topic": topic,
            "seq": msg.seq,
            "lane": msg.lane,
            "timestamp": _iso(msg.publish_time_ms),
            "publisher": msg.publisher_id,
            "key": _json_bytes(m.key),
            "headers": {k: _json_bytes(v) for k, v in m.headers},
        }
        try:
            obj["value"] = m.value.decode("utf-8")
        except UnicodeDecodeError:
            obj["value_base64"] = base64.b64encode(m.value).decode()
        return json.dumps(obj, ensure_ascii=False)
    # A lane's message says its lane: ``LANE:SEQ`` (lane 0, the topic itself: ``SEQ``).
    parts = [f"{msg.lane}:{msg.seq}" if msg.lane else str(msg.seq)]
    for f in fields:
        if f == "timestamp":
            parts.append(_iso(msg.publish_time_ms))
        elif f == "publisher":
            parts.append(msg.publisher_id)
        elif f == "key":
            parts.append(_text(m.key) if m.key is not None else "-")
        elif f == "headers":
            parts.append(";".join(f"{k}={_text(v)}" for k, v in m.headers) or "-")
    parts.append(_text(m.value))
    return "\t".join(parts)


def _iso(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).isoformat(timespec="milliseconds")


def _json_bytes(b: bytes | None) -> str | None:
    return None if b is None else b.decode("utf-8", errors="backslashreplace")


async def _sub(hubs: list[str], args: argparse.Namespace, fields: list[str]) -> int:
    received = 0
    async with HedwigClient(hubs, security=client_security(args)) as client:
        mode = MODES[args.mode]
        if mode is not SubscribeMode.ATTACH:
            notice = await _what_is_new(client, args.topic, args.subscriber, args.earliest)
            if notice:
                print(f"hedwig sub: {notice}", file=sys.stderr, flush=True)
        if args.earliest and mode is not SubscribeMode.ATTACH:
            try:
                await create_subscription(client, args.topic, args.subscriber, earliest=True)
            except SubscriptionExistsError:
                if mode is SubscribeMode.CREATE:
                    raise
            mode = SubscribeMode.ATTACH
        sub = await client.subscribe(
            args.topic,
            args.subscriber,
            mode=mode,
            message_window=args.window,
            force_attach=args.force_attach,
        )
        while args.count is None or received < args.count:
            try:
                msg = await sub.next(args.timeout)
            except DeadlineExceededError:
                if args.count is not None or not received:
                    got = f"{received} of {args.count}" if args.count is not None else "nothing"
                    print(
                        f"hedwig sub: {args.timeout:g} s without a message; {got} received",
                        file=sys.stderr,
                    )
                    return 1
                break
            print(_line(msg, args.topic, fields, args.json), flush=True)
            sub.consume(msg)
            received += 1
        await sub.sync()
        await sub.close()
    return 0


async def _what_is_new(
    client: HedwigClient, topic: str, subscriber: str, earliest: bool
) -> str | None:
    """What subscribing is about to create, told rather than done silently: a topic that did
    not exist (a typo makes one), a subscription that starts at the end. Nothing is created
    by asking; a caller who may not describe the topic is told nothing."""
    try:
        described = await client.describe_topic(topic)
    except NoSuchTopicError:
        return (
            f"topic {topic!r} does not exist: subscribing creates it, with subscription "
            f"{subscriber!r} ('hedwig topics' lists the topics; 'hedwig topic delete "
            f"{topic}' removes a mistyped one)"
        )
    except ForbiddenError:
        return None
    if any(s.name == subscriber for s in described.subscriptions) or earliest:
        return None
    return (
        f"subscription {subscriber!r} of {topic!r} is new: it receives what is published "
        f"from now on (--earliest: from the first kept message, {described.first_available})"
    )


async def _peek(hubs: list[str], args: argparse.Namespace, fields: list[str]) -> int:
    printed = 0
    seq = max(0, args.from_seq)
    waited = 0.0
    async with HedwigClient(hubs, security=client_security(args)) as client:
        while args.count is None or printed < args.count:
            answer = await client.read(args.topic, seq, max_messages=1000)
            got = False
            for batch in answer.batches:
                for msg in batch.delivered():
                    if msg.seq < max(seq, 1) or (args.count is not None and printed >= args.count):
                        continue
                    print(_line(msg, args.topic, fields, args.json))
                    printed += 1
                    seq = msg.seq + 1
                    got = True
            sys.stdout.flush()
            if got:
                waited = 0.0
                continue
            seq = max(seq, answer.last_seq + 1)
            if args.timeout is None or waited >= args.timeout:
                break  # caught up with the end of the topic
            await asyncio.sleep(0.2)
            waited += 0.2
    if args.count is not None and printed < args.count:
        print(f"hedwig sub: the topic ended after {printed} of {args.count}", file=sys.stderr)
        return 1
    return 0
