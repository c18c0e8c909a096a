"""``hedwig pub``: publish stdin, a message per line (or a JSON object per line), as fast as the
hubs acknowledge them, or at a fixed ``--rate``.

Lines are read in large chunks and handed to the client without waiting for each
acknowledgement (up to ``--window`` unacknowledged), so a pipe of 100-byte lines runs at hundreds
of thousands per second. Each acknowledgement prints ``SEQ<TAB>MESSAGE`` (``--quiet``: nothing),
in publishing order. A failure that retrying cannot fix (a refused message, a region with too
few hubs) stops the command at once with what went wrong and what to do; transient trouble (a
topic moving, a hub restarting) is shown on stderr while the client retries, never silence.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import functools
import json
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from datetime import datetime

from hedwig.cli.common import add_hub_options, client_security, report, resolve_hubs
from hedwig.cli.output import Progress, rate
from hedwig.client import HedwigClient, PublishResult, RetryPolicy
from hedwig.errors import HedwigError, UsageError
from hedwig.metadata.records.queueing import parse_duration_ms

CHUNK = 1 << 20


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "pub",
        help="publish stdin, a message per line; print SEQ<TAB>MESSAGE per acknowledgement",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    add_hub_options(p)
    p.add_argument("topic")
    p.add_argument("--key", help="the key of every message")
    p.add_argument(
        "-K",
        "--key-separator",
        metavar="SEP",
        help="each line is KEY<SEP>VALUE (as kcat -K)",
    )
    p.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a header on every message (repeatable)",
    )
    p.add_argument(
        "--input",
        choices=["lines", "json"],
        default="lines",
        help='json: each line is {"value": ..., "key": ..., "headers": {...}} (UTF-8 text)',
    )
    delay = p.add_mutually_exclusive_group()
    delay.add_argument(
        "--deliver-after",
        metavar="DURATION",
        help="hold each message back this long from its publish (10s, 5m, 1h) from the "
        "consumers of failover, shared and key-shared subscriptions",
    )
    delay.add_argument(
        "--deliver-at",
        metavar="TIME",
        help="hold every message back until TIME: ISO 8601 with a zone "
        "(2026-12-02T15:00:00Z) or epoch seconds",
    )
    p.add_argument("--rate", type=float, default=0.0, help="messages per second (0: flat out)")
    p.add_argument("-q", "--quiet", action="store_true", help="print no acknowledgements")
    p.add_argument(
        "--summary",
        action="store_true",
        help="print counts and rate at the end (always on a terminal)",
    )
    p.add_argument("--window", type=int, default=100_000, help="unacknowledged messages at most")
    p.add_argument(
        "--retry-deadline",
        type=float,
        default=30.0,
        help="seconds to keep retrying a message through failovers (default 30)",
    )
    p.add_argument(
        "--wait-for-hubs",
        action="store_true",
        help="in a region with too few hubs for its replication, wait for more instead of "
        "failing at once",
    )
    p.set_defaults(func=run_pub)


def run_pub(args: argparse.Namespace) -> int:
    try:
        args.delay = _delay(args.deliver_after, args.deliver_at)
        headers = _headers(args.header)
        hubs = resolve_hubs(args)
    except HedwigError as exc:
        return report("pub", exc)
    return asyncio.run(Publisher(args, hubs, headers).run())


def _delay(after: str | None, at: str | None) -> dict[str, float | datetime]:
    """``publish``'s delivery-time arguments for ``--deliver-after`` / ``--deliver-at``."""
    if after is not None:
        try:
            return {"deliver_after": parse_duration_ms(after) / 1000}
        except UsageError as exc:
            raise UsageError(f"--deliver-after: {exc}") from exc
    if at is None:
        return {}
    try:
        return {"deliver_at": float(at)}
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(at)
    except ValueError as exc:
        raise UsageError(
            f"--deliver-at is ISO 8601 with a zone or epoch seconds, not {at!r}"
        ) from exc
    if when.tzinfo is None:
        raise UsageError(f"--deliver-at needs a zone (say {at}Z or {at}+01:00)")
    return {"deliver_at": when}


def _headers(specs: list[str]) -> tuple[tuple[str, bytes], ...]:
    out = []
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"a header is NAME=VALUE, got {spec!r}")
        out.append((name, value.encode()))
    return tuple(out)


async def _chunks() -> AsyncIterator[bytes]:
    """stdin in chunks of up to a MiB, read on a thread (stdin may be a file or a terminal)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[bytes] = asyncio.Queue(maxsize=8)

    def read() -> None:
        stream = sys.stdin.buffer
        while True:
            chunk = stream.read1(CHUNK) if hasattr(stream, "read1") else stream.read(CHUNK)
            try:
                asyncio.run_coroutine_threadsafe(queue.put(chunk), loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                return  # the command stopped early: nobody reads any more
            if not chunk:
                return

    threading.Thread(target=read, name="stdin", daemon=True).start()
    while chunk := await queue.get():
        yield chunk


class Publisher:
    def __init__(
        self, args: argparse.Namespace, hubs: list[str], headers: tuple[tuple[str, bytes], ...]
    ) -> None:
        self.args = args
        self.hubs = hubs
        self.headers = headers
        self.key = args.key.encode() if args.key is not None else None
        self.sep = args.key_separator.encode() if args.key_separator else None
        self.pending: deque[tuple[int, bytes, asyncio.Future[PublishResult]]] = deque()
        self.sent = 0
        self.acked = 0
        self.duplicates = 0
        self.out = sys.stdout.buffer
        self.progress = Progress()
        if not (args.quiet or not sys.stdout.isatty()):
            self.progress.enabled = False  # acknowledgements go to the terminal already
        self._last_wait = 0.0

    def _waiting(self, topic: str, error: HedwigError, seconds: float) -> None:
        now = time.monotonic()
        if now - self._last_wait >= 2.0:
            self._last_wait = now
            self.progress.done()
            # stderr may be gone (piped into ``head``, which exited): the retries then go on
            # to their deadline untold, rather than this failing inside the client.
            with contextlib.suppress(OSError):
                print(
                    f"hedwig pub: retrying topic {topic!r} ({seconds:.0f} s of "
                    f"{self.args.retry_deadline:g} so far): {error}",
                    file=sys.stderr,
                    flush=True,
                )

    async def run(self) -> int:
        args = self.args
        retry = RetryPolicy(deadline_s=args.retry_deadline)
        start = time.monotonic()
        try:
            async with HedwigClient(
                self.hubs,
                retry=retry,
                wait_for_hubs=args.wait_for_hubs,
                on_wait=self._waiting,
                security=client_security(args),
            ) as client:
                await self._publish_all(client, start)
                await self._settle(block=True, room=0)
        except _Stop as stop:
            self.progress.done()
            resume = self._print_stored(stop.line)
            self._abandon()
            code = report("pub", stop.error, stop.where) if stop.error else 1
            if resume > 1:
                # What a script needs to publish the rest once, without duplicates.
                print(
                    f"hedwig pub: the {resume - 1} lines before line {resume} were stored "
                    f"({'acknowledged above' if not args.quiet else 'not printed: --quiet'}); "
                    f"line {resume} and those after it were not",
                    file=sys.stderr,
                )
            return code
        except HedwigError as exc:
            self.progress.done()
            return report("pub", exc)
        finally:
            self.out.flush()
        self.progress.done()
        elapsed = time.monotonic() - start
        if args.summary or sys.stderr.isatty():
            dup = f", {self.duplicates} duplicates" if self.duplicates else ""
            print(
                f"hedwig pub: {self.acked} messages acknowledged in {elapsed:.2f} s "
                f"({rate(self.acked, elapsed)}){dup}",
                file=sys.stderr,
            )
        return 0

    async def _publish_all(self, client: HedwigClient, start: float) -> None:
        args = self.args
        topic = args.topic
        carry = b""
        line_no = 0
        key, sep, headers = self.key, self.sep, self.headers
        as_json = args.input == "json"
        publish = client.publish_nowait
        if args.delay:
            publish = functools.partial(publish, **args.delay)
        pending = self.pending
        pace = args.rate
        async for chunk in _chunks():
            lines = (carry + chunk).split(b"\n")
            carry = lines.pop()
            for line in lines:
                line_no += 1
                if line.endswith(b"\r"):
                    line = line[:-1]
                value, k, h = line, key, headers
                if as_json:
                    value, k, h = _from_json(line, line_no, headers)
                elif sep is not None:
                    k, found, rest = line.partition(sep)
                    if not found:
                        raise _Stop(
                            UsageError(f"line {line_no} has no key separator {sep!r}"),
                            line=line_no,
                        )
                    value = rest
                try:
                    fut = publish(topic, value, key=k, headers=h)
                except HedwigError as exc:
                    raise _refused(line_no, value, exc) from None
                pending.append((line_no, value, fut))
                self.sent += 1
                if pace:
                    ahead = start + self.sent / pace - time.monotonic()
                    if ahead > 0.001:
                        await self._settle(block=False)
                        await asyncio.sleep(ahead)
            await self._settle(block=len(pending) > args.window, room=args.window // 2)
            self.progress.show(
                f"{self.acked:,} acknowledged, {rate(self.acked, time.monotonic() - start)}"
            )
        if carry:
            self.pending.append(
                (line_no + 1, carry, publish(topic, carry, key=key, headers=headers))
            )
            self.sent += 1

    async def _settle(self, *, block: bool, room: int = 0) -> None:
        """Print acknowledgements in publishing order; with ``block``, wait for the oldest
        until at most ``room`` messages are unacknowledged."""
        pending = self.pending
        lines: list[bytes] = []
        quiet = self.args.quiet
        while pending:
            line_no, value, fut = pending[0]
            if not fut.done():
                if not block or len(pending) <= room:
                    break
                self._flush(lines)
                lines = []
                await asyncio.wait([fut])
                continue
            pending.popleft()
            exc = fut.exception()
            if exc is not None:
                self._flush(lines)
                raise _refused(line_no, value, exc)
            result = fut.result()
            self.acked += 1
            if result.duplicate:
                self.duplicates += 1
            if not quiet:
                lines.append(b"%d\t%s\n" % (result.seq, value))
        self._flush(lines)

    def _print_stored(self, stopped_at: int) -> int:
        """Stopping at line ``stopped_at``: print the acknowledgements of the lines before it
        that were stored meanwhile (closing the client waited for them), in order, up to the
        first that was not; the first line not stored (0: not known)."""
        if not stopped_at:
            return 0
        lines: list[bytes] = []
        first_missing = stopped_at
        for line_no, value, fut in self.pending:
            if line_no >= stopped_at:
                break
            if not fut.done() or fut.cancelled() or fut.exception() is not None:
                first_missing = line_no
                break
            result = fut.result()
            self.acked += 1
            if not self.args.quiet:
                lines.append(b"%d\t%s\n" % (result.seq, value))
        self._flush(lines)
        return first_missing

    def _abandon(self) -> None:
        """Stopping early: what is still pending is given up (and its errors, already told
        once, are not reported again by asyncio)."""
        for _, _, fut in self.pending:
            if fut.done() and not fut.cancelled():
                fut.exception()
            else:
                fut.cancel()
        self.pending.clear()

    def _flush(self, lines: list[bytes]) -> None:
        if lines:
            self.out.write(b"".join(lines))
            if self.out.isatty():
                self.out.flush()


class _Stop(Exception):
    def __init__(self, error: BaseException | None, where: str = "", line: int = 0) -> None:
        super().__init__(str(error))
        self.error = error
        self.where = where
        # The line it stopped at: those before it were sent (0: not a line's fault).
        self.line = line


def _refused(line_no: int, value: bytes, exc: BaseException) -> _Stop:
    """Stop for a message that was refused, naming its line and size, never echoing it."""
    error = exc if isinstance(exc, HedwigError) else HedwigError(repr(exc))
    return _Stop(error, f"line {line_no} ({len(value):,} bytes) was not published", line_no)


def _from_json(
    line: bytes, line_no: int, defaults: tuple[tuple[str, bytes], ...]
) -> tuple[bytes, bytes | None, tuple[tuple[str, bytes], ...]]:
    try:
        obj = json.loads(line)
        value = str(obj["value"]).encode()
        key = obj.get("key")
        headers = tuple((str(k), str(v).encode()) for k, v in dict(obj.get("headers", {})).items())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise _Stop(
            UsageError(
                f'line {line_no} is not {{"value": ..., "key": ..., "headers": {{}}}}: {exc}'
            ),
            line=line_no,
        ) from None
    return value, (str(key).encode() if key is not None else None), (defaults + headers)
