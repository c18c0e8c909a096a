"""Ordered, batched, pipelined publishing to one topic.

Messages queue up and are cut into batches (up to ``max_batch_messages`` messages and
``max_batch_bytes`` bytes); each batch carries the publisher id and the publisher sequence of
its first message, so a hub recognises a re-sent batch and does not store it twice. Up to
``max_inflight_batches`` batches are in flight at once. The log must hold each publisher's
messages in the order they were published, through moves and failures; these rules keep it so.

A batch is *outstanding* from when it is cut until it is *settled* (acknowledged, or failed for
good). The *gate* decides when the next batch may be cut:

    state          entered when                      a new batch               left when
    -------------  --------------------------------  ------------------------  ------------------
    open           none of the below applies         is cut and sent at once   -
    owner unknown  no owner known (first use, moved) waits until none is       an answer names
                                                     outstanding               the owner
    re-sending     a batch failed; it is sent again  waits: the gate is shut   every failed batch
                                                                               has settled
    barrier        TOPIC_MOVED came while batches    waits: the gate is shut   every batch cut
                   were outstanding                                            before the move
                                                                               has settled

and a batch that is sent again, or that was cut just before the gate closed, first waits until
every batch cut before it has settled: without that, a later batch could be stored ahead of an
earlier one still being retried, and the earlier one would then look like a duplicate.

The gate is checked again just before each attempt goes out, once its connection is made (a
connection to a hub that went away may take a while): a batch cut before a failure was noticed
waits there for the failed ones. And whatever order the answers come in, a publisher's futures
resolve in the order its batches were cut, as Kafka's callbacks do: a batch stored after an
earlier one whose answer was lost is answered first, and the earlier one's re-send a moment later
(as the duplicate it is), yet its caller hears of it after the earlier one's.

Hubs keep the order too: a hub refuses a batch that would leave a gap in its publisher's
sequence (OUT_OF_ORDER), and the batch is sent again after the earlier ones. So when a batch
fails for good (its retry deadline passed, or a hub refused it outright), the batches after it
can never be stored in order under the same identity: they fail too
(``EarlierBatchFailedError``), and later messages go out under a new identity (the publisher
id with an epoch suffix, sequences from 1 again).

A topic served by lanes (``hedwig.metadata.plans``) takes each publisher's messages on one
lane, which a hub names by answering USE_LANE. That batch was not stored (the hub checks for
a duplicate first), nor was any batch after it: the publisher closes the gate, lets the earlier
batches settle where they are, puts every refused batch back at the head of the queue in its
order, and cuts them again for the lane named, under a fresh identity (``hedwig.metadata.
plans.publisher_base``: the lane is chosen by the id before the epoch suffix, so the new
identity belongs to the same lane). A fresh identity because the lane may have seen this
publisher before, with sequences the new ones would leave a gap after. So a publisher's
messages are in order in each lane, and each lane holds them from some point on.

What waits in the queue is either one message with its own future (``publish_nowait``), one
message nobody waits on (``send``: no future, as Kafka's ``produce`` without a delivery
callback; a failure is kept and ``flush`` raises it), or a *chunk*: many messages encoded
together that settle together (``publish_batch``), each chunk small enough to fit a batch on
its own. A chunk is never split across batches, so it needs one result and one future, not one
per message: a caller that already holds many messages pays for the bookkeeping once per chunk.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Protocol, cast, overload

from hedwig.client.routing import Router
from hedwig.clock import Clock
from hedwig.errors import EarlierBatchFailedError, HedwigError, SendFailedError, UseLaneError
from hedwig.flag import Flag
from hedwig.protocol import EncodedMessage, EncodedMessages, Publish, Published, lane_of

log = logging.getLogger(__name__)

_new_tuple = tuple.__new__


class PublishResult(NamedTuple):
    """Where a message landed: its sequence id in the topic (0 if a duplicate of unknown place).

    A named tuple rather than a frozen dataclass: one is made per message published, and it
    is the cheaper of the two to make."""

    seq: int
    duplicate: bool = False
    # The lane it went to (``hedwig.metadata.plans``; 0: the topic itself). ``seq`` is its
    # place in that lane.
    lane: int = 0


class BatchPublishResult(Sequence[PublishResult]):
    """Where the messages of one ``publish_batch`` landed, in the order they were given.

    A sequence of ``PublishResult``, made on demand from one run per chunk (first sequence
    id, count, duplicate), so a batch of a million messages is a handful of tuples. Chunks are
    stored in order but need not be adjacent in the topic (other publishers' batches may land
    between them), hence ``runs`` rather than one first sequence id."""

    __slots__ = ("_lanes", "_len", "_runs")

    def __init__(
        self, runs: Sequence[tuple[int, int, bool]], lanes: Sequence[int] | None = None
    ) -> None:
        self._runs = tuple(runs)
        self._lanes = tuple(lanes) if lanes is not None else (0,) * len(self._runs)
        self._len = sum(n for _, n, _ in self._runs)

    @property
    def runs(self) -> tuple[tuple[int, int, bool], ...]:
        """``(first_seq, count, duplicate)`` per chunk (first_seq 0: a duplicate whose place
        is unknown)."""
        return self._runs

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> PublishResult: ...
    @overload
    def __getitem__(self, index: slice) -> list[PublishResult]: ...
    def __getitem__(self, index: int | slice) -> PublishResult | list[PublishResult]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        for (first, n, dup), lane in zip(self._runs, self._lanes, strict=True):
            if index < n:
                return PublishResult(first + index if first else 0, dup, lane)
            index -= n
        raise IndexError(index)  # pragma: no cover (the lengths add up)

    def __iter__(self) -> Iterator[PublishResult]:
        for (first, n, dup), lane in zip(self._runs, self._lanes, strict=True):
            if first:
                for seq in range(first, first + n):
                    yield PublishResult(seq, dup, lane)
            else:
                for _ in range(n):
                    yield PublishResult(0, dup, lane)

    def __repr__(self) -> str:
        return f"BatchPublishResult(runs={self._runs!r})"


class _Call:
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


class _Chunk:
    """A queued chunk: ``count`` messages (encoded together in the queue) of one call."""

    __slots__ = ("call", "count", "index")

    def __init__(self, call: _Call, index: int, count: int) -> None:
        self.call = call
        self.index = index
        self.count = count


_Future = asyncio.Future[PublishResult]
# ``None``: a message queued by ``send``, with no future.
_Waiter = _Future | _Chunk | None


class BatchLimits(Protocol):
    max_batch_messages: int
    max_batch_bytes: int
    max_inflight_batches: int
    linger_s: float


@dataclass
class _Batch:
    publisher_id: str
    pseq: int
    messages: EncodedMessages
    # One per message, or one per chunk (then ``has_chunks``).
    futures: list[_Waiter]
    has_chunks: bool = False
    # The topic (or lane) it is sent to, and its queued parts (to queue again if the lane
    # refuses it).
    target: str = ""
    raws: list[bytes] | None = None
    # Its outcome, kept until every batch cut before it has had its own told
    # (``TopicPublisher._tell_in_order``): the answer, or the error it failed with for good.
    finished: bool = False
    answer: Published | None = None
    error: HedwigError | None = None


class TopicPublisher:
    def __init__(
        self,
        topic: str,
        *,
        publisher_id: str,
        router: Router,
        limits: BatchLimits,
        clock: Clock,
    ) -> None:
        self.topic = topic
        # Where batches go: the topic, or the lane of it that takes this publisher.
        self.target = topic
        self.lane_switches = 0
        self._switch_to: str | None = None
        self._refused: list[_Batch] = []
        self._base_id = publisher_id
        self._publisher_id = publisher_id
        self._epoch = 0
        # Per identity, the first publisher sequence that failed for good.
        self._broken_from: dict[str, int] = {}
        self._router = router
        self._limits = limits
        self._clock = clock
        # Encoded messages (or chunks) waiting for a batch, and their waiters: two lists read
        # from ``_head`` on (the hot path: a batch is cut with two slices, not a step per
        # message). While no chunk is queued, every element is one message.
        self._raws: list[bytes] = []
        self._futs: list[_Waiter] = []
        self._head = 0
        self._chunks_queued = 0
        # Messages queued by ``send`` that failed for good since the last ``flush``, and the
        # first failure.
        self._send_failures = 0
        self._send_error: BaseException | None = None
        # The cutting task waits for ``_wakeup`` (a plain flag tells ``add`` so: cheaper than
        # asking the event every message).
        self._idle = False
        self._next_pseq = 1
        self._inflight = asyncio.Semaphore(limits.max_inflight_batches)
        self._wakeup = Flag()
        self._settled = Flag()
        self._gate = Flag()
        self._gate.set()
        self._failed: set[int] = set()
        self._barrier_pseq = 0  # batches below this must settle before the gate reopens
        self._outstanding: dict[int, _Batch] = {}
        # Every batch cut and not yet told, in the order cut.
        self._untold: deque[_Batch] = deque()
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run())

    def add(self, raw: EncodedMessage) -> asyncio.Future[PublishResult]:
        """Queue one encoded message; the future resolves once it is durable."""
        fut: asyncio.Future[PublishResult] = self._loop.create_future()
        self._raws.append(raw)
        self._futs.append(fut)
        if self._idle:
            self._idle = False
            self._wakeup.set()
        return fut

    def send(self, raw: EncodedMessage) -> None:
        """Queue one encoded message nobody waits on: no future is made, set or collected
        (with tens of thousands in flight, the cycle collector walking them cost more than
        the rest of a one-by-one publish). A failure is kept for ``flush`` to raise."""
        self._raws.append(raw)
        self._futs.append(None)
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
        call = _Call(fut, len(chunks))
        for i, (payload, count) in enumerate(chunks):
            self._raws.append(payload)
            self._futs.append(_Chunk(call, i, count))
        self._chunks_queued += len(chunks)
        if self._idle:
            self._idle = False
            self._wakeup.set()
        return fut

    def stop(self) -> None:
        self._task.cancel()

    def barrier(self) -> None:
        """The topic moved: hold new batches until those in flight have settled, so none of
        them can reach the new owner ahead of an earlier one still coming back from the old."""
        if self._outstanding:
            self._barrier_pseq = max(self._barrier_pseq, self._next_pseq)
            self._gate.clear()

    async def flush(self) -> None:
        """Wait until every message queued so far has settled; raise ``SendFailedError`` if
        messages queued by ``send`` failed for good since the last flush."""
        batches = [*self._outstanding.values(), *self._refused]
        futs: list[asyncio.Future[object]] = []
        for b in batches:
            # A batch settles all its messages at once: a future for its last ``send`` one
            # stands for them all.
            futs += self._awaitable(b.futures, every=False)
        # Those still queued may be cut into several batches: one future for each.
        head = self._head
        queued = self._futs[head:]
        futs += self._awaitable(queued, every=True)
        self._futs[head : head + len(queued)] = queued
        # One by one, skipping those already settled: a batch settles all its futures at
        # once, so this waits about once per batch (``gather`` would hook every future), and
        # ``wait`` leaves the futures alone if this flush is cancelled.
        for f in futs:
            if not f.done():
                await asyncio.wait((f,))
        if self._send_error is not None:
            count, first = self._send_failures, self._send_error
            self._send_failures, self._send_error = 0, None
            raise SendFailedError(
                f"topic {self.topic!r}: {count} message(s) queued by send failed: {first}",
                count=count,
                first=first,
            ) from first

    def _awaitable(self, waiters: list[_Waiter], *, every: bool) -> list[asyncio.Future[object]]:
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
            elif isinstance(w, _Chunk):
                futs.append(cast("asyncio.Future[object]", w.call.future))
            else:
                futs.append(cast("asyncio.Future[object]", w))
        if last_none >= 0:
            waiters[last_none] = self._stand_in(futs)
        return futs

    def _stand_in(self, futs: list[asyncio.Future[object]]) -> _Future:
        fut: _Future = self._loop.create_future()
        fut.add_done_callback(self._stand_in_done)
        futs.append(cast("asyncio.Future[object]", fut))
        return fut

    def _stand_in_done(self, fut: _Future) -> None:
        if not fut.cancelled() and (exc := fut.exception()) is not None:
            self._note_send_failure(exc, 1)

    def _note_send_failure(self, exc: BaseException, count: int) -> None:
        self._send_failures += count
        if self._send_error is None:
            self._send_error = exc

    # the gate -------------------------------------------------------------------------------

    def _reopen(self) -> None:
        if self._barrier_pseq and (
            not self._outstanding or min(self._outstanding) >= self._barrier_pseq
        ):
            self._barrier_pseq = 0
        if not self._failed and not self._barrier_pseq and self._switch_to is None:
            self._gate.set()

    async def _earlier_settled(self, pseq: int) -> None:
        while self._outstanding and min(self._outstanding) < pseq:
            self._settled.clear()
            await self._settled.wait()

    async def _wait_turn(self, batch: _Batch) -> None:
        """Before any re-send: close the gate and wait until every earlier batch settled."""
        self._failed.add(batch.pseq)
        self._gate.clear()
        await self._earlier_settled(batch.pseq)
        broken = self._broken_from.get(batch.publisher_id)
        if broken is not None and batch.pseq > broken:
            raise EarlierBatchFailedError(
                f"topic {self.topic!r}: an earlier batch of this publisher failed for good"
            )

    def _failed_for_good(self, batch: _Batch) -> None:
        """Batches after this one cannot be stored in order any more: start a new identity."""
        known = self._broken_from.get(batch.publisher_id)
        self._broken_from[batch.publisher_id] = min(batch.pseq, known or batch.pseq)
        if batch.publisher_id == self._publisher_id:
            self._new_identity()

    def _new_identity(self) -> None:
        self._epoch += 1
        self._publisher_id = f"{self._base_id}~{self._epoch}"
        self._next_pseq = 1

    # lanes ----------------------------------------------------------------------------------

    def _lane_refused(self, batch: _Batch, exc: UseLaneError) -> None:
        """A lane sent this (unstored) batch elsewhere: hold it, and everything after it."""
        self._refused.append(batch)
        self._switch_to = exc.lane or self.topic
        self._gate.clear()

    def _switch_lane(self) -> None:
        """Every batch has settled or been refused: queue the refused ones again, in order,
        ahead of what was never cut, and go on at the lane named."""
        refused, self._refused = sorted(self._refused, key=lambda b: b.pseq), []
        head = self._head
        for b in reversed(refused):
            assert b.raws is not None
            self._raws[head:head] = b.raws
            self._futs[head:head] = b.futures
            self._chunks_queued += sum(1 for w in b.futures if isinstance(w, _Chunk))
        assert self._switch_to is not None
        self.target, self._switch_to = self._switch_to, None
        self.lane_switches += 1
        self._new_identity()
        self._wakeup.set()

    # cutting and sending ----------------------------------------------------------------------

    async def _run(self) -> None:
        limits = self._limits
        while True:
            if len(self._raws) == self._head:
                self._wakeup.clear()
                self._idle = True
                await self._wakeup.wait()
                if limits.linger_s:
                    await self._clock.sleep(limits.linger_s)
            await self._inflight.acquire()
            await self._gate.wait()
            # Owner unknown: one batch at a time. Pipelined first tries could reach different
            # hubs, and whichever claims the topic first would store a later batch ahead of an
            # earlier one.
            while self._router.owner_of(self.target) is None and self._outstanding:
                self._settled.clear()
                await self._settled.wait()
            batch = self._cut(limits.max_batch_messages, limits.max_batch_bytes)
            self._outstanding[batch.pseq] = batch
            self._untold.append(batch)
            self._loop.create_task(self._send(batch))

    def _cut(self, max_messages: int, max_bytes: int) -> _Batch:
        if self._chunks_queued:
            return self._cut_chunks(max_messages, max_bytes)
        raws, head = self._raws, self._head
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
        batch = _Batch(
            self._publisher_id,
            self._next_pseq,
            EncodedMessages.of_joined(parts, len(parts)),
            self._futs[head:end],
            target=self.target,
            raws=parts,
        )
        self._taken(end)
        self._next_pseq += len(parts)
        return batch

    def _taken(self, end: int) -> None:
        """The queue's head moved to ``end``: forget what is before it, now and then (a
        ``del`` of a list's front moves the rest, so not at every cut)."""
        raws = self._raws
        if end == len(raws):
            raws.clear()
            self._futs.clear()
            end = 0
        elif end >= 4096 and end * 2 >= len(raws):
            del raws[:end]
            del self._futs[:end]
            end = 0
        self._head = end

    def _cut_chunks(self, max_messages: int, max_bytes: int) -> _Batch:
        """``_cut`` while chunks are queued: a chunk counts its messages and is never split."""
        raws, futs, i = self._raws, self._futs, self._head
        parts: list[bytes] = []
        waiters: list[_Waiter] = []
        size = count = chunks = 0
        while i < len(raws):
            raw, waiter = raws[i], futs[i]
            n = waiter.count if isinstance(waiter, _Chunk) else 1
            if parts and (size + len(raw) > max_bytes or count + n > max_messages):
                break
            i += 1
            parts.append(raw)
            waiters.append(waiter)
            size += len(raw)
            count += n
            if isinstance(waiter, _Chunk):
                chunks += 1
        self._chunks_queued -= chunks
        self._taken(i)
        batch = _Batch(
            self._publisher_id,
            self._next_pseq,
            EncodedMessages.of_joined(parts, count),
            waiters,
            has_chunks=bool(chunks),
            target=self.target,
            raws=parts,
        )
        self._next_pseq += count
        return batch

    async def _send(self, batch: _Batch) -> None:
        topic, pid = batch.target, batch.publisher_id

        async def wait_turn() -> None:
            await self._wait_turn(batch)

        def not_ahead() -> Awaitable[None] | None:
            # Just before each attempt goes out (after a connection was made, which may have
            # taken a while): a batch cut before a failure was noticed must not overtake the
            # failed ones on their way to the owner. Were it stored first, it would be
            # acknowledged ahead of them, or, at a hub that no longer knows this publisher,
            # stored ahead of them. With the gate open (nearly always) nothing is awaited.
            return None if self._gate.is_set() else self._earlier_settled(batch.pseq)

        try:
            if not self._gate.is_set():
                # Cut just before a failure was noticed: wait before choosing where to send it.
                await self._earlier_settled(batch.pseq)
            try:
                answer, _ = await self._router.topic_request(
                    topic,
                    lambda rid, redirected: Publish(
                        request_id=rid,
                        topic=topic,
                        publisher_id=pid,
                        publisher_seq=batch.pseq,
                        messages=batch.messages,
                        redirected=redirected,
                    ),
                    before_retry=wait_turn,
                    before_send=not_ahead,
                )
            except UseLaneError as exc:
                self._lane_refused(batch, exc)
                return
            except HedwigError as exc:
                if not isinstance(exc, EarlierBatchFailedError):
                    self._failed_for_good(batch)
                unwaited = batch.futures.count(None)
                if unwaited:
                    self._note_send_failure(exc, unwaited)
                    log.warning(
                        "topic %r: %d message(s) queued by send failed: %s",
                        self.topic,
                        unwaited,
                        exc,
                    )
                batch.error = exc
                return
            assert isinstance(answer, Published)
            batch.answer = answer
        finally:
            batch.finished = True
            self._outstanding.pop(batch.pseq, None)
            self._failed.discard(batch.pseq)
            if self._switch_to is not None and not self._outstanding:
                self._switch_lane()
            self._reopen()
            self._settled.set()
            self._inflight.release()
            self._tell_in_order()  # last: nothing above may be skipped

    def _tell_in_order(self) -> None:
        """Resolve the futures of every finished batch not preceded by an unfinished one, in
        the order the batches were cut: a publisher's results come in the order it published,
        as Kafka's callbacks do, even when a later batch is answered first (it was stored after
        an earlier one whose answer was lost, and the earlier one's re-send is answered as the
        duplicate it is a moment later)."""
        untold = self._untold
        while untold and untold[0].finished:
            self._tell(untold.popleft())

    def _tell(self, batch: _Batch) -> None:
        futures = batch.futures
        if batch.error is not None:
            exc = batch.error
            for w in futures:
                if w is None:
                    continue
                if isinstance(w, _Chunk):
                    w.call.fail(exc)
                elif not w.done():
                    w.set_exception(exc)
            return
        answer = batch.answer
        if answer is None:
            return  # refused by a lane: its messages are queued again, in a new batch
        first, dup = answer.first_seq, answer.duplicate
        lane = lane_of(batch.target)[1] if batch.target != self.topic else 0
        unwaited = futures.count(None)
        if unwaited == len(futures):
            pass  # all queued by ``send``: nothing to tell anyone
        elif batch.has_chunks or unwaited:
            _settle_mixed(futures, first, dup, lane)
        elif first:
            # One tuple per message, made without ``PublishResult.__new__`` (a Python
            # function: twice the cost).
            for seq, f in enumerate(cast(list[_Future], futures), first):
                if not f.done():
                    f.set_result(_new_tuple(PublishResult, (seq, dup, lane)))
        else:
            unknown = PublishResult(0, dup, lane)
            for f in cast(list[_Future], futures):
                if not f.done():
                    f.set_result(unknown)


def _settle_mixed(waiters: list[_Waiter], first: int, dup: bool, lane: int) -> None:
    """Resolve a batch of single messages and chunks, in order, from its first sequence id."""
    seq = first
    for w in waiters:
        if w is None:
            seq += 1
        elif isinstance(w, _Chunk):
            w.call.settle(w.index, seq if first else 0, w.count, dup, lane)
            seq += w.count
        else:
            if not w.done():
                w.set_result(PublishResult(seq if first else 0, dup, lane))
            seq += 1
