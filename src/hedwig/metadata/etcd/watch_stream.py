"""Watches on one etcd watch stream: created, dispatched, resumed after a break, cancelled.

etcd multiplexes any number of watches on one gRPC stream, each a key or a range of keys from
a start revision: a watch per owned topic costs a little memory on both sides and nothing per
second. ``WatchStream`` is that stream, and the one place that knows how etcd's watch protocol
goes (every watch of the client rides it: ``watches`` holds the kinds):

- **Creation.** ``watch`` queues a create request; etcd answers each with ``created`` and the
  watch's id, in the order they were sent, so the creates under way are a queue matched to
  those answers. The stream opens at the first watch.
- **Changes.** Each response carries a watch id and its events in revision order; the watch's
  handler gets them and says whether it is done (a watch that fires once is then cancelled on
  the stream).
- **Compaction and cancellation.** A watch from a revision etcd has compacted is cancelled by
  etcd at once (``compact_revision``); so is one etcd refuses (a permission). Either ends the
  watch (``ended``): its holder reads again. ``cancel`` ends one from this side, and nothing
  more reaches its handler.
- **A break** (etcd gone, a connection lost, a token refused, the stream closed) ends every
  watch made with ``resume=False`` (their holders read again, whatever happened meanwhile).
  A watch made with ``resume=True`` is told (``interrupted``) and goes on: the stream is made
  again and the watch created on it from the revision after the last change it was given (its
  start revision if none), so no change is missed or given twice; if etcd has compacted that
  revision meanwhile, the watch ends as above.
- **Back-off on the clock.** The stream is made again 200 ms after a break, then twice as
  long after each break without a response in between, 2 s at most (etcd comes back within
  seconds of a restart; a session is lost in a few).

Handlers run on the event loop, in the stream's task; they must not block.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.clock import Clock
from hedwig.errors import MetadataError
from hedwig.metadata.etcd.connection import Connection

log = logging.getLogger(__name__)

# The stream made again after a break: first wait, longest (seconds).
BACKOFF_S = (0.2, 2.0)


class WatchHandler(Protocol):
    """What a watch's holder is told."""

    def changed(self, events: Sequence[Any]) -> bool:
        """Changes of the watched keys (etcd's ``Event`` messages, in revision order); True:
        the watch is done (it is cancelled)."""
        ...

    def created(self) -> None:
        """etcd has the watch on the stream (again, after a break, for one that resumes)."""
        ...

    def interrupted(self) -> None:
        """The stream broke; the watch goes on from its last change once it is back."""
        ...

    def ended(self) -> None:
        """The watch is over (the stream broke, etcd compacted its start or cancelled it):
        nothing more comes."""
        ...


class Once:
    """A handler that calls ``callback`` once, at the first change or at the watch's end."""

    __slots__ = ("callback",)

    def __init__(self, callback: Callable[[], None]) -> None:
        self.callback = callback

    def changed(self, events: Sequence[Any]) -> bool:
        self.callback()
        return True

    def created(self) -> None:
        pass

    def interrupted(self) -> None:  # made without resume: never told
        pass

    def ended(self) -> None:
        self.callback()


class Watch:
    """One watch of the stream: ``next`` is the revision it is created from (after a break,
    the one after its last change); ``id`` etcd's, once created (-1 before)."""

    __slots__ = ("end", "handler", "id", "key", "next", "resume")

    def __init__(
        self, key: bytes, end: bytes, start: int, handler: WatchHandler, resume: bool
    ) -> None:
        self.key = key
        self.end = end
        self.next = start
        self.handler = handler
        self.resume = resume
        self.id = -1


class WatchStream:
    """Every watch of one client on one etcd watch stream (see the module's docstring)."""

    def __init__(self, connection: Connection, *, clock: Clock) -> None:
        self._connection = connection
        self._clock = clock
        # Created on the stream, by etcd's id.
        self._by_id: dict[int, Watch] = {}
        # Sent (or queued to be sent) on the stream now open, awaiting their ``created``.
        self._creating: collections.deque[Watch] = collections.deque()
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # For tests: the streams made, and the breaks.
        self.opened = 0
        self.breaks = 0

    def watch(
        self,
        key: bytes,
        end: bytes,
        start: int,
        handler: WatchHandler,
        *,
        resume: bool = False,
    ) -> Watch:
        """Watch ``key`` (up to ``end``, exclusive, if given) from revision ``start``."""
        w = Watch(key, end, start, handler, resume)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._create(w)
        return w

    def _create(self, w: Watch) -> None:
        self._creating.append(w)
        create = rpc.WatchCreateRequest(key=w.key, range_end=w.end, start_revision=w.next)
        self._requests.put_nowait(rpc.WatchRequest(create_request=create))

    def cancel(self, w: Watch) -> None:
        """End ``w`` from this side: its handler hears nothing more."""
        w.resume = False
        w.handler = _CANCELLED
        if w.id >= 0 and self._by_id.pop(w.id, None) is w:
            self._send_cancel(w.id)

    def _send_cancel(self, watch_id: int) -> None:
        cancel = rpc.WatchCancelRequest(watch_id=watch_id)
        self._requests.put_nowait(rpc.WatchRequest(cancel_request=cancel))

    async def _run(self) -> None:
        backoff = BACKOFF_S[0]
        while not self._closed:
            self.opened += 1
            try:
                async for resp in self._connection.watch(self._requests):
                    backoff = BACKOFF_S[0]
                    self._on(resp)
            except MetadataError:
                pass
            if self._closed:
                return
            self.breaks += 1
            self._broken()
            await self._clock.sleep(backoff)
            backoff = min(backoff * 2, BACKOFF_S[1])

    def _broken(self) -> None:
        """The stream is gone: every watch on it ends but those that resume, which are
        queued again for the next stream (in the order they were made)."""
        watches = [*self._by_id.values(), *self._creating]
        self._by_id.clear()
        self._creating.clear()
        self._requests = asyncio.Queue()
        for w in watches:
            w.id = -1
            if w.resume:
                self._create(w)
                w.handler.interrupted()
            else:
                w.handler.ended()

    def _on(self, resp: Any) -> None:
        wid = int(resp.watch_id)
        if resp.created:
            if not self._creating:
                return
            w = self._creating.popleft()
            if w.handler is _CANCELLED:
                self._send_cancel(wid)
                return
            w.id = wid
            self._by_id[wid] = w
            w.handler.created()
        else:
            found = self._by_id.get(wid)
            if found is None:
                return
            w = found
        if resp.events:
            w.next = int(resp.events[-1].kv.mod_revision) + 1
            if w.handler.changed(resp.events):
                del self._by_id[wid]
                self._send_cancel(wid)
                return
        if resp.canceled or resp.compact_revision:
            if resp.compact_revision:
                log.info("etcd compacted the history of a watch (from revision %d)", w.next)
            self._by_id.pop(wid, None)
            w.resume = False
            w.handler.ended()

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class _Cancelled:
    """The handler of a cancelled watch: told nothing, it does nothing."""

    def changed(self, events: Sequence[Any]) -> bool:
        return True

    def created(self) -> None:
        pass

    def interrupted(self) -> None:
        pass

    def ended(self) -> None:
        pass


_CANCELLED = _Cancelled()
