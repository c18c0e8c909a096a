"""Who waits on a queued message, and how a settled batch tells them.

A queued message has one of three waiters: its own future (``publish_nowait``); nobody
(``None``: ``send``, as Kafka's ``produce`` without a delivery callback, so no future is made,
set or collected, and a failure is kept for ``flush`` to raise, ``sends``); or a ``Chunk`` of a
``publish_batch`` call: many messages encoded together that settle together. A chunk is never
split across batches, so it needs one result and one future, not one per message: a caller
that already holds many messages pays for the bookkeeping once per chunk, and its call
(``BatchCall``) resolves once every chunk has settled, or at the first failure.

A batch's messages hold consecutive sequence ids from the first one its answer names, so its
waiters are told in one pass (``tell_answer``): a batch of single messages with one tuple per
message made without ``PublishResult.__new__`` (a Python function: twice the cost).
"""

from __future__ import annotations

import asyncio
from typing import cast

from hedwig.client.publishing.results import BatchPublishResult, PublishResult

_new_tuple = tuple.__new__


class BatchCall:
    """One ``publish_batch`` call: its chunks settle one by one, its future once."""

    __slots__ = ("future", "lanes", "pending", "runs")

    def __init__(self, future: asyncio.Future[BatchPublishResult], chunks: int) -> None:
        self.future = future
        self.runs: list[tuple[int, int, bool]] = [(0, 0, False)] * chunks
        self.lanes: list[int] = [0] * chunks
        self.pending = chunks

    def settle(self, index: int, first: int, count: int, dup: bool, lane: int) -> None:
        self.runs[index] = (first, count, dup)
        self.lanes[index] = lane
        self.pending -= 1
        if not self.pending and not self.future.done():
            self.future.set_result(BatchPublishResult(self.runs, self.lanes))

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class Chunk:
    """A queued chunk: ``count`` messages (encoded together in the queue) of one call."""

    __slots__ = ("call", "count", "index")

    def __init__(self, call: BatchCall, index: int, count: int) -> None:
        self.call = call
        self.index = index
        self.count = count


Future = asyncio.Future[PublishResult]
# ``None``: a message queued by ``send``, with no future.
Waiter = Future | Chunk | None


def tell_answer(waiters: list[Waiter], first: int, dup: bool, lane: int, has_chunks: bool) -> None:
    """Resolve a stored batch's waiters from its first sequence id (0: a duplicate whose place
    is unknown)."""
    unwaited = waiters.count(None)
    if unwaited == len(waiters):
        pass  # all queued by ``send``: nothing to tell anyone
    elif has_chunks or unwaited:
        _settle_mixed(waiters, first, dup, lane)
    elif first:
        # One tuple per message, made without ``PublishResult.__new__`` (a Python
        # function: twice the cost).
        for seq, f in enumerate(cast(list[Future], waiters), first):
            if not f.done():
                f.set_result(_new_tuple(PublishResult, (seq, dup, lane)))
    else:
        unknown = PublishResult(0, dup, lane)
        for f in cast(list[Future], waiters):
            if not f.done():
                f.set_result(unknown)


def tell_error(waiters: list[Waiter], exc: BaseException) -> None:
    """Fail a batch's waiters (those queued by ``send`` hear of it through ``flush``)."""
    for w in waiters:
        if w is None:
            continue
        if isinstance(w, Chunk):
            w.call.fail(exc)
        elif not w.done():
            w.set_exception(exc)


def _settle_mixed(waiters: list[Waiter], first: int, dup: bool, lane: int) -> None:
    """Resolve a batch of single messages and chunks, in order, from its first sequence id."""
    seq = first
    for w in waiters:
        if w is None:
            seq += 1
        elif isinstance(w, Chunk):
            w.call.settle(w.index, seq if first else 0, w.count, dup, lane)
            seq += w.count
        else:
            if not w.done():
                w.set_result(PublishResult(seq if first else 0, dup, lane))
            seq += 1
