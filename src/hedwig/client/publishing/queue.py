"""A topic publisher's queue: messages waiting to be cut into a batch, and who waits on them.

The hot path. What is queued is kept in two lists read from ``head`` on: the encoded messages
(or chunks, ``waiters.Chunk``) and their waiters. A message is queued with two appends and a
batch is cut with two slices, not a step per message; what is before ``head`` is forgotten
now and then (``del`` of a list's front moves the rest, so not at every cut). While no chunk is
queued, every element is one message, and a cut takes as many as the batch limits allow (the
longest run that fits when the messages are large, at least one). While chunks are queued, a
chunk counts its messages and is never split across batches.

The cutting task sleeps while the queue is empty (``wait``); a plain flag tells ``add`` that it
does, cheaper than asking the event at every message.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import NamedTuple

from hedwig.client.publishing.batch import OutgoingBatch
from hedwig.client.publishing.results import BatchPublishResult, PublishResult
from hedwig.client.publishing.sends import SendFailures
from hedwig.client.publishing.waiters import BatchCall, Chunk, Waiter
from hedwig.flag import Flag
from hedwig.protocol import EncodedMessage


class Cut(NamedTuple):
    """What a batch is cut from: its parts (a message or a chunk each), their waiters, and
    the messages they hold."""

    parts: list[bytes]
    waiters: list[Waiter]
    messages: int
    has_chunks: bool


class PublishQueue:
    __slots__ = ("_idle", "_loop", "_wakeup", "chunks", "head", "raws", "waiters")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.raws: list[bytes] = []
        self.waiters: list[Waiter] = []
        self.head = 0
        # Chunks queued (0: every element is one message).
        self.chunks = 0
        self._idle = False
        self._wakeup = Flag()

    @property
    def empty(self) -> bool:
        return len(self.raws) == self.head

    def add(self, raw: EncodedMessage) -> asyncio.Future[PublishResult]:
        """Queue one encoded message; the future resolves once it is durable."""
        fut: asyncio.Future[PublishResult] = self._loop.create_future()
        self.raws.append(raw)
        self.waiters.append(fut)
        if self._idle:
            self._idle = False
            self._wakeup.set()
        return fut

    def send(self, raw: EncodedMessage) -> None:
        """Queue one encoded message nobody waits on: no future is made, set or collected
        (with tens of thousands in flight, the cycle collector walking them cost more than
        the rest of a one-by-one publish). A failure is kept for ``flush`` to raise."""
        self.raws.append(raw)
        self.waiters.append(None)
        if self._idle:
            self._idle = False
            self._wakeup.set()

    def add_chunks(self, chunks: Sequence[tuple[bytes, int]]) -> asyncio.Future[BatchPublishResult]:
        """Queue chunks of encoded messages (``(payload, count)``, each within the batch
        limits); the future resolves once all are durable, or fails with the first failure."""
        fut: asyncio.Future[BatchPublishResult] = self._loop.create_future()
        if not chunks:
            fut.set_result(BatchPublishResult(()))
            return fut
        call = BatchCall(fut, len(chunks))
        for i, (payload, count) in enumerate(chunks):
            self.raws.append(payload)
            self.waiters.append(Chunk(call, i, count))
        self.chunks += len(chunks)
        if self._idle:
            self._idle = False
            self._wakeup.set()
        return fut

    async def wait(self) -> None:
        """Until something is queued (or ``wake``)."""
        self._wakeup.clear()
        self._idle = True
        await self._wakeup.wait()

    def wake(self) -> None:
        self._wakeup.set()

    def put_back(self, batches: Sequence[OutgoingBatch]) -> None:
        """Queue the messages of ``batches`` (cut, and refused unstored) again, in this order,
        ahead of everything never cut."""
        head = self.head
        for b in reversed(batches):
            self.raws[head:head] = b.raws
            self.waiters[head:head] = b.waiters
            self.chunks += sum(1 for w in b.waiters if isinstance(w, Chunk))

    def futures(self, sends: SendFailures) -> list[asyncio.Future[object]]:
        """A future for each message (or call) queued, to wait for them all: a stand-in is
        made for each one queued by ``send`` (its outcome kept as a ``send`` failure would be),
        since they may be cut into several batches."""
        head = self.head
        queued = self.waiters[head:]
        futs = sends.awaitable(queued, every=True)
        self.waiters[head : head + len(queued)] = queued
        return futs

    # cutting ---------------------------------------------------------------------------------

    def cut(self, max_messages: int, max_bytes: int) -> Cut:
        """The next batch's parts and their waiters."""
        if self.chunks:
            return self._cut_chunks(max_messages, max_bytes)
        raws, head = self.raws, self.head
        end = min(len(raws), head + max_messages)
        parts = raws[head:end]
        if sum(map(len, parts)) > max_bytes:
            # Large messages: the longest run that fits (at least one message).
            size = k = 0
            for raw in parts:
                if k and size + len(raw) > max_bytes:
                    break
                size += len(raw)
                k += 1
            del parts[k:]
            end = head + k
        waiters = self.waiters[head:end]
        self._taken(end)
        return Cut(parts, waiters, len(parts), False)

    def _taken(self, end: int) -> None:
        """The queue's head moved to ``end``: forget what is before it, now and then (a
        ``del`` of a list's front moves the rest, so not at every cut)."""
        raws = self.raws
        if end == len(raws):
            raws.clear()
            self.waiters.clear()
            end = 0
        elif end >= 4096 and end * 2 >= len(raws):
            del raws[:end]
            del self.waiters[:end]
            end = 0
        self.head = end

    def _cut_chunks(self, max_messages: int, max_bytes: int) -> Cut:
        """``cut`` while chunks are queued: a chunk counts its messages and is never split."""
        raws, futs, i = self.raws, self.waiters, self.head
        parts: list[bytes] = []
        waiters: list[Waiter] = []
        size = count = chunks = 0
        while i < len(raws):
            raw, waiter = raws[i], futs[i]
            n = waiter.count if isinstance(waiter, Chunk) else 1
            if parts and (size + len(raw) > max_bytes or count + n > max_messages):
                break
            i += 1
            parts.append(raw)
            waiters.append(waiter)
            size += len(raw)
            count += n
            if isinstance(waiter, Chunk):
                chunks += 1
        self.chunks -= chunks
        self._taken(i)
        return Cut(parts, waiters, count, bool(chunks))
