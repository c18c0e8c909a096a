"""``hedwig pub`` and ``hedwig sub``: lines in, ``SEQ<TAB>MESSAGE`` out."""

from __future__ import annotations

import argparse
import asyncio
import sys
import threading

from hedwig.cli.common import add_hub_options, client_security, resolve_hubs
from hedwig.client import HedwigClient, PublishResult, SubscribeMode
from hedwig.client.retry import RetryPolicy
from hedwig.errors import DeadlineExceededError, HedwigError
from hedwig.security import ClientSecurity

MODES = {
    "create": SubscribeMode.CREATE,
    "attach": SubscribeMode.ATTACH,
    "create-or-attach": SubscribeMode.CREATE_OR_ATTACH,
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("pub", help="publish stdin lines; print SEQ<TAB>MESSAGE per ack")
    add_hub_options(p)
    p.add_argument("topic")
    p.add_argument(
        "--retry-deadline",
        type=float,
        default=30.0,
        help="seconds to keep retrying a message through failovers",
    )
    p.set_defaults(func=run_pub)

    p = sub.add_parser("sub", help="subscribe; print SEQ<TAB>MESSAGE per message and consume it")
    add_hub_options(p)
    p.add_argument("topic")
    p.add_argument("subscriber")
    p.add_argument("--mode", choices=list(MODES), default="create-or-attach")
    p.add_argument("--count", type=int, default=None, help="exit after this many messages")
    p.add_argument(
        "--timeout", type=float, default=None, help="exit after this many seconds without a message"
    )
    p.add_argument("--window", type=int, default=1000, help="message window (flow control)")
    p.set_defaults(func=run_sub)


def _text(value: bytes) -> str:
    return value.decode("utf-8", errors="backslashreplace")


def run_pub(args: argparse.Namespace) -> int:
    try:
        hubs = resolve_hubs(args)
    except HedwigError as exc:
        print(f"hedwig pub: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(_pub(hubs, args.topic, args.retry_deadline, client_security(args)))


async def _pub(hubs: list[str], topic: str, deadline: float, security: ClientSecurity) -> int:
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[bytes | None] = asyncio.Queue(maxsize=10_000)

    def reader() -> None:
        for raw in sys.stdin.buffer:
            asyncio.run_coroutine_threadsafe(lines.put(raw.rstrip(b"\r\n")), loop).result()
        asyncio.run_coroutine_threadsafe(lines.put(None), loop).result()

    threading.Thread(target=reader, daemon=True).start()
    pending: asyncio.Queue[tuple[bytes, asyncio.Future[PublishResult]] | None] = asyncio.Queue()
    failed = 0
    async with HedwigClient(
        hubs, retry=RetryPolicy(deadline_s=deadline), security=security
    ) as client:

        async def printer() -> None:
            nonlocal failed
            while (item := await pending.get()) is not None:
                value, fut = item
                try:
                    result = await fut
                except HedwigError as exc:
                    failed += 1
                    print(f"hedwig pub: not acknowledged: {_text(value)!r}: {exc}", file=sys.stderr)
                    continue
                sys.stdout.write(f"{result.seq}\t{_text(value)}\n")
                sys.stdout.flush()

        task = asyncio.create_task(printer())
        try:
            while (value := await lines.get()) is not None:
                try:
                    fut = client.publish_nowait(topic, value)
                except HedwigError as exc:
                    print(f"hedwig pub: {exc}", file=sys.stderr)
                    failed += 1
                    continue
                await pending.put((value, fut))
        finally:
            await pending.put(None)
            await task
    return 1 if failed else 0


def run_sub(args: argparse.Namespace) -> int:
    try:
        hubs = resolve_hubs(args)
    except HedwigError as exc:
        print(f"hedwig sub: {exc}", file=sys.stderr)
        return 2
    try:
        return asyncio.run(_sub(hubs, args))
    except HedwigError as exc:
        print(f"hedwig sub: {exc}", file=sys.stderr)
        return 1


async def _sub(hubs: list[str], args: argparse.Namespace) -> int:
    received = 0
    async with HedwigClient(hubs, security=client_security(args)) as client:
        sub = await client.subscribe(
            args.topic, args.subscriber, mode=MODES[args.mode], message_window=args.window
        )
        while args.count is None or received < args.count:
            try:
                msg = await sub.next(args.timeout)
            except DeadlineExceededError:
                if args.count is not None:
                    print(
                        f"hedwig sub: timed out after {args.timeout}s with {received} of "
                        f"{args.count} messages",
                        file=sys.stderr,
                    )
                    return 1
                break
            sys.stdout.write(f"{msg.seq}\t{_text(msg.value)}\n")
            sys.stdout.flush()
            sub.consume(msg.seq)
            received += 1
        await sub.close()
    return 0
