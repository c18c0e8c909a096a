"""Messages queued by ``send``: nobody waits on them, so their failures wait for ``flush``.

A message queued by ``send`` has no future (``waiters``). When its batch fails for good the
failure is counted here, the first one kept, and the next ``flush`` raises
``SendFailedError`` with both, then starts counting afresh. ``flush`` still has to wait for such
messages: it gives them futures of their own (stand-ins) only then, one for the last of them
in a batch (a batch settles all its messages at once) and one for each still queued (they may
be cut into several batches); a stand-in that fails counts as one ``send`` failure.
"""

from __future__ import annotations

import asyncio
from typing import cast

from hedwig.client.publishing.results import PublishResult
from hedwig.client.publishing.waiters import Chunk, Future, Waiter
from hedwig.errors import SendFailedError


class SendFailures:
    __slots__ = ("_loop", "count", "first")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        # Messages queued by ``send`` that failed for good since the last ``flush``, and the
        # first failure.
        self.count = 0
        self.first: BaseException | None = None

    def note(self, exc: BaseException, count: int) -> None:
        self.count += count
        if self.first is None:
            self.first = exc

    def raise_any(self, topic: str) -> None:
        """``SendFailedError`` if any failed since the last time; they are forgotten then."""
        if self.first is not None:
            count, first = self.count, self.first
            self.count, self.first = 0, None
            raise SendFailedError(
                f"topic {topic!r}: {count} message(s) queued by send failed: {first}",
                count=count,
                first=first,
            ) from first

    def awaitable(self, waiters: list[Waiter], *, every: bool) -> list[asyncio.Future[object]]:
        """The futures to wait for among ``waiters``, giving a ``send`` message (``None``) one
        in place: each of them (``every``), or the last one only. Its outcome is kept as a
        ``send`` failure would be."""
        futs: list[asyncio.Future[object]] = []
        last_none = -1
        for i, w in enumerate(waiters):
            if w is None:
                if every:
                    waiters[i] = self._stand_in(futs)
                else:
                    last_none = i
            elif isinstance(w, Chunk):
                futs.append(cast("asyncio.Future[object]", w.call.future))
            else:
                futs.append(cast("asyncio.Future[object]", w))
        if last_none >= 0:
            waiters[last_none] = self._stand_in(futs)
        return futs

    def _stand_in(self, futs: list[asyncio.Future[object]]) -> Future:
        fut: asyncio.Future[PublishResult] = self._loop.create_future()
        fut.add_done_callback(self._stand_in_done)
        futs.append(cast("asyncio.Future[object]", fut))
        return fut

    def _stand_in_done(self, fut: Future) -> None:
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            self.note(exc, 1)
