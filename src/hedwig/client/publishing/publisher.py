"""One topic's publisher: batches cut from its queue, sent pipelined, told in the order cut.

Messages queue up (``queue``) and are cut into batches of up to ``max_batch_messages``
messages and ``max_batch_bytes`` bytes; each batch carries the publisher id and the publisher
sequence of its first message, so a hub recognises a re-sent batch and does not store it
twice. Up to ``max_inflight_batches`` batches are in flight at once, as far as the gate
(``gate``) lets them go: the log must hold each publisher's messages in the order they were
published, through moves and failures. These rules keep it so:

- Whatever order the answers come in, a publisher's futures resolve in the order its batches
  were cut, as Kafka's callbacks do: a batch stored after an earlier one whose answer was lost
  is answered first, and the earlier one's re-send a moment later (as the duplicate it is),
  yet its caller hears of it after the earlier one's.
- Hubs keep the order too: a hub refuses a batch that would leave a gap in its publisher's
  sequence (OUT_OF_ORDER), and the batch is sent again after the earlier ones. So when a batch
  fails for good (its retry deadline passed, or a hub refused it outright), the batches after
  it can never be stored in order under the same identity: they fail too
  (``EarlierBatchFailedError``), and later messages go out under a new identity (the publisher
  id with an epoch suffix, sequences from 1 again).
- A topic served by lanes (``hedwig.metadata.plans``) takes each publisher's messages on one
  lane, which a hub names by answering USE_LANE. That batch was not stored (the hub checks for
  a duplicate first), nor was any batch after it: the publisher shuts the gate, lets the
  earlier batches settle where they are, puts every refused batch back at the head of the
  queue in its order, and cuts them again for the lane named, under a fresh identity
  (``hedwig.protocol.names.publisher_identity``: the lane is chosen by the id before the epoch
  suffix, so the new identity belongs to the same lane). A fresh identity because the lane may
  have seen this publisher before, with sequences the new ones would leave a gap after. So a
  publisher's messages are in order in each lane, and each lane holds them from some point on.

``add``, ``send`` and ``add_chunks`` are the queue's own methods, bound once: queueing a message
costs no call of the publisher's.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from hedwig.client.publishing.batch import OutgoingBatch
from hedwig.client.publishing.gate import Gate
from hedwig.client.publishing.queue import PublishQueue
from hedwig.client.publishing.results import BatchPublishResult, PublishResult
from hedwig.client.publishing.sends import SendFailures
from hedwig.client.publishing.waiters import tell_answer, tell_error
from hedwig.client.routing import Router
from hedwig.clock import Clock
from hedwig.errors import EarlierBatchFailedError, HedwigError, UseLaneError
from hedwig.protocol import EncodedMessage, EncodedMessages, Publish, Published, lane_of
from hedwig.protocol.names import publisher_identity

log = logging.getLogger(__name__)


class BatchLimits(Protocol):
    max_batch_messages: int
    max_batch_bytes: int
    max_inflight_batches: int
    linger_s: float


class TopicPublisher:
    # Queue one encoded message; the future resolves once it is durable.
    add: Callable[[EncodedMessage], asyncio.Future[PublishResult]]
    # Queue one encoded message nobody waits on (``flush`` raises its failure).
    send: Callable[[EncodedMessage], None]
    # Queue chunks of encoded messages (``(payload, count)``, each within the batch limits);
    # the future resolves once all are durable, or fails with the first failure.
    add_chunks: Callable[[Sequence[tuple[bytes, int]]], asyncio.Future[BatchPublishResult]]

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
        # Where batches go: the topic, or the lane of it that takes this publisher (and that
        # lane's index, 0 for the topic itself).
        self.target = topic
        self.lane = 0
        self.lane_switches = 0
        self._switch_to: str | None = None
        self._refused: list[OutgoingBatch] = []
        self._base_id = publisher_id
        self._publisher_id = publisher_id
        self._epoch = 0
        # Per identity, the first publisher sequence that failed for good.
        self._broken_from: dict[str, int] = {}
        self._router = router
        self._limits = limits
        self._clock = clock
        self._next_pseq = 1
        self._inflight = asyncio.Semaphore(limits.max_inflight_batches)
        self._gate = Gate()
        # Every batch cut and not yet told, in the order cut.
        self._untold: deque[OutgoingBatch] = deque()
        self._loop = asyncio.get_running_loop()
        self._queue = queue = PublishQueue(self._loop)
        self._sends = SendFailures(self._loop)
        self.add, self.send, self.add_chunks = queue.add, queue.send, queue.add_chunks
        self._task = self._loop.create_task(self._run())

    def stop(self) -> None:
        self._task.cancel()

    def barrier(self) -> None:
        """The topic moved: hold new batches until those in flight have settled, so none of
        them can reach the new owner ahead of an earlier one still coming back from the old."""
        self._gate.barrier(self._next_pseq)

    async def flush(self) -> None:
        """Wait until every message queued so far has settled; raise ``SendFailedError`` if
        messages queued by ``send`` failed for good since the last flush."""
        batches = [*self._gate.outstanding.values(), *self._refused]
        futs: list[asyncio.Future[object]] = []
        for b in batches:
            # A batch settles all its messages at once: a future for its last ``send`` one
            # stands for them all.
            futs += self._sends.awaitable(b.waiters, every=False)
        futs += self._queue.futures(self._sends)
        # One by one, skipping those already settled: a batch settles all its futures at
        # once, so this waits about once per batch (``gather`` would hook every future), and
        # ``wait`` leaves the futures alone if this flush is cancelled.
        for f in futs:
            if not f.done():
                await asyncio.wait((f,))
        self._sends.raise_any(self.topic)

    # identities -------------------------------------------------------------------------------

    async def _wait_turn(self, batch: OutgoingBatch) -> None:
        """Before any re-send: shut the gate and wait until every earlier batch settled."""
        self._gate.resending(batch.pseq)
        await self._gate.earlier_settled(batch.pseq)
        broken = self._broken_from.get(batch.publisher_id)
        if broken is not None and batch.pseq > broken:
            raise EarlierBatchFailedError(
                f"topic {self.topic!r}: an earlier batch of this publisher failed for good"
            )

    def _failed_for_good(self, batch: OutgoingBatch) -> None:
        """Batches after this one cannot be stored in order any more: start a new identity."""
        known = self._broken_from.get(batch.publisher_id)
        self._broken_from[batch.publisher_id] = min(batch.pseq, known or batch.pseq)
        if batch.publisher_id == self._publisher_id:
            self._new_identity()

    def _new_identity(self) -> None:
        self._epoch += 1
        self._publisher_id = publisher_identity(self._base_id, self._epoch)
        self._next_pseq = 1

    # lanes ----------------------------------------------------------------------------------

    def _lane_refused(self, batch: OutgoingBatch, exc: UseLaneError) -> None:
        """A lane sent this (unstored) batch elsewhere: hold it, and everything after it."""
        self._refused.append(batch)
        self._switch_to = exc.lane or self.topic
        self._gate.switching_lane()

    def _switch_lane(self, target: str) -> None:
        """Every batch has settled or been refused: queue the refused ones again, in order,
        ahead of what was never cut, and go on at the lane named."""
        refused, self._refused = sorted(self._refused, key=lambda b: b.pseq), []
        self._queue.put_back(refused)
        self.target, self._switch_to = target, None
        # The lane's index, read once from its name (0: the topic itself).
        self.lane = lane_of(target)[1] if target != self.topic else 0
        self._gate.lane_switched()
        self.lane_switches += 1
        self._new_identity()
        self._queue.wake()

    # cutting and sending ----------------------------------------------------------------------

    def _owner_known(self) -> bool:
        return self._router.owner_of(self.target) is not None

    async def _run(self) -> None:
        limits, queue, gate = self._limits, self._queue, self._gate
        while True:
            if queue.empty:
                await queue.wait()
                if limits.linger_s:
                    await self._clock.sleep(limits.linger_s)
            await self._inflight.acquire()
            await gate.wait_to_cut(self._owner_known)
            parts, waiters, count, has_chunks = queue.cut(
                limits.max_batch_messages, limits.max_batch_bytes
            )
            batch = OutgoingBatch(
                self._publisher_id,
                self._next_pseq,
                EncodedMessages.of_joined(parts, count),
                waiters,
                has_chunks,
                self.target,
                self.lane,
                parts,
            )
            self._next_pseq += count
            gate.cut(batch)
            self._untold.append(batch)
            self._loop.create_task(self._send(batch))

    async def _send(self, batch: OutgoingBatch) -> None:
        topic, pid, gate = batch.target, batch.publisher_id, self._gate

        async def wait_turn() -> None:
            await self._wait_turn(batch)

        def not_ahead() -> Awaitable[None] | None:
            # Just before each attempt goes out (after a connection was made, which may have
            # taken a while): a batch cut before a failure was noticed must not overtake the
            # failed ones on their way to the owner. Were it stored first, it would be
            # acknowledged ahead of them, or, at a hub that no longer knows this publisher,
            # stored ahead of them. With the gate open (nearly always) nothing is awaited.
            return None if gate.is_open() else gate.earlier_settled(batch.pseq)

        try:
            if not gate.is_open():
                # Cut just before a failure was noticed: wait before choosing where to send it.
                await gate.earlier_settled(batch.pseq)
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
                unwaited = batch.waiters.count(None)
                if unwaited:
                    self._sends.note(exc, unwaited)
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
            gate.settle(batch.pseq)
            if self._switch_to is not None and not gate.outstanding:
                self._switch_lane(self._switch_to)
            gate.reopen()
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
            batch = untold.popleft()
            if batch.error is not None:
                tell_error(batch.waiters, batch.error)
            elif (answer := batch.answer) is not None:
                tell_answer(
                    batch.waiters, answer.first_seq, answer.duplicate, batch.lane, batch.has_chunks
                )
            # Neither: refused by a lane, its messages are queued again, in a new batch.
