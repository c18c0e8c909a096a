"""A delivery hub's view of a fan-out topic's log: the owner's confirmed log, tailed.

Rules:

- One tail per topic per delivery hub, however many subscribers it serves there: the owner
  sends each batch to each delivery hub once, and the delivery hubs fan it out. That is the
  whole point of fan-out (the owner's bytes out no longer grow with the subscribers).
- The tail is a long poll (TAIL_TOPIC): the owner answers as soon as a batch past what we have
  is confirmed, so a delivery hub adds about one hub-to-hub round trip to delivery latency.
- Only confirmed batches are ever seen (the owner serves reads only up to its last confirmed
  sequence), and they are kept contiguous: ``last_seq`` is the highest sequence held with
  every earlier one either held or readable, so a subscription reading through this log gets
  the topic's order with nothing skipped, exactly as from the owner's own ``TopicLog``.
- Recent batches are kept in memory (``CACHE_BYTES``); a subscriber further behind reads
  through the owner (a TAIL_TOPIC without waiting), as the owner itself would read older
  ledgers.
- The owner is found like a client finds it: the owner record, then redirects (with the
  redirected flag, so a hub that is chosen claims). Hub to hub requests go to the owner's
  internal listener when hubs have one (the closed plane, with this hub's certificate).
- A failure to reach the owner is not the subscribers' problem: reads raise ``LedgerError``,
  which a subscription waits out while staying attached; the tail retries with backoff.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import (
    HedwigError,
    LedgerError,
    NoSuchTopicError,
    NotResponsibleError,
    TopicMovingError,
)
from hedwig.flag import Flag
from hedwig.hub.owning.peers import HubDialer
from hedwig.metadata.managers import MetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import Batch, Messages, TailTopic

log = logging.getLogger(__name__)

# Recent batches kept for the subscribers of this hub, in bytes.
CACHE_BYTES = 16 * 1024 * 1024
# One long poll waits this long for a batch before asking again (bounds how long a tail can
# sit on an owner that has just handed the topic over).
WAIT_MS = 500
# Messages and bytes asked for per poll.
TAIL_MESSAGES = 10_000
TAIL_BYTES = 4 * 1024 * 1024
# Beyond the wait, how long a poll's answer may take.
REQUEST_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 2.0
# Redirects followed per request before treating it as a failure.
MAX_REDIRECTS = 3
# How long a topic may have no owner record before the tail asks its own hub (which claims
# by placement), rather than waiting for a hand-off's destination to claim.
OWNERLESS_WAIT_S = 2.0
# Backoff between failed polls.
RETRY_MIN_S = 0.02
RETRY_MAX_S = 1.0


class TailLog:
    """Quacks like ``hedwig.ledger.topic_log.TopicLog`` for ``hedwig.hub.serving.subscription``."""

    def __init__(
        self,
        topic: str,
        *,
        address: str,
        store: MetadataStore,
        dialer: HubDialer,
        clock: Clock,
        cache_bytes: int = CACHE_BYTES,
    ) -> None:
        self.topic = topic
        self.first_seq = 1
        self.last_seq = 0
        self.broken: LedgerError | None = None
        self._address = address
        self._store = store
        self._dialer = dialer
        self._clock = clock
        self._cache: deque[Batch] = deque()
        self._cache_bytes = 0
        self._cache_limit = cache_bytes
        self._changed = Flag()
        self._conn: HubConnection | None = None
        self._conn_target: str | None = None
        # Where the next request goes (a client address) and whether it was named by a
        # redirect; None: look the owner up.
        self._target: str | None = None
        self._redirected = False
        self._ownerless_since: float | None = None
        self._task: asyncio.Task[None] | None = None
        # Called once if the topic turns out to be deleted.
        self.on_deleted: Callable[[], None] = lambda: None
        # Answers received from the owner, for tests and metrics.
        self.polls = 0

    # lifecycle --------------------------------------------------------------------------------

    async def start(self) -> None:
        """Learn the topic's bounds (so new subscriptions start at its end), then tail."""
        answer = await self._request(0, 0, 0, 0)
        self.first_seq = answer.first_available
        self.last_seq = answer.last_seq
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
        if self.broken is None:
            self.broken = LedgerError(f"topic {self.topic!r} is no longer delivered here")
        self._notify()
        self._drop_connection()

    @property
    def upstream(self) -> str | None:
        """The hub this tail reads from (for tests and logs)."""
        return self._conn_target

    # the TopicLog interface a subscription reads through ------------------------------------------

    async def wait_beyond(self, seq: int, timeout: float | None = None) -> bool:
        while self.last_seq <= seq and self.broken is None:
            try:
                await asyncio.wait_for(self._changed.wait(), timeout)
            except TimeoutError:
                return False
        return self.last_seq > seq

    async def read(self, start: int, limit: int, max_bytes: int) -> list[Batch]:
        if start > self.last_seq:
            return []
        if self._cache and self._cache[0].first_seq <= start:
            return self._from_cache(start, limit, max_bytes)
        try:
            answer = await self._request(start - 1, limit, max_bytes, 0)
        except HedwigError as exc:
            raise LedgerError(f"reading {self.topic!r} from its owner: {exc}") from exc
        # The owner may have confirmed more than the tail has seen (the tail waits out a
        # failure with backoff; a subscriber's read can reach the next owner first): what it
        # answered is confirmed and contiguous, so it extends this log. Were it delivered
        # while ``last_seq`` lagged behind, the subscriber's consumes of it would be capped
        # at ``last_seq``, its message window would fill with messages it has consumed, and
        # delivery to it would stop for good.
        self._take(answer)
        return [b for b in answer.batches if start <= b.last_seq <= self.last_seq]

    def _from_cache(self, start: int, limit: int, max_bytes: int) -> list[Batch]:
        out: list[Batch] = []
        count = size = 0
        for batch in self._cache:
            if batch.last_seq < start:
                continue
            if out and (count + batch.count > limit or size + len(batch.payload) > max_bytes):
                break
            out.append(batch)
            count += batch.count
            size += len(batch.payload)
        return out

    # tailing ----------------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = RETRY_MIN_S
        failing = False
        while True:
            try:
                answer = await self._request(self.last_seq, TAIL_MESSAGES, TAIL_BYTES, WAIT_MS)
            except asyncio.CancelledError:
                raise
            except NoSuchTopicError as exc:
                self.broken = LedgerError(f"topic {self.topic!r} was deleted: {exc}")
                self._notify()
                self.on_deleted()
                return
            except HedwigError as exc:
                if not failing:
                    log.warning("tail of %r waits for its owner: %s", self.topic, exc)
                failing = True
                self._drop_connection()
                self._target, self._redirected = None, False
                await self._clock.sleep(delay)
                delay = min(RETRY_MAX_S, delay * 2)
                continue
            if failing:
                log.info("tail of %r reads from %s again", self.topic, self._conn_target)
            failing = False
            delay = RETRY_MIN_S
            self.polls += 1
            self._take(answer)

    def _take(self, answer: Messages) -> None:
        """Keep what ``answer`` adds past ``last_seq`` (a poll's, or a read's)."""
        self.first_seq = answer.first_available
        grew = False
        for batch in answer.batches:
            if batch.last_seq <= self.last_seq:
                continue
            if batch.first_seq > self.last_seq + 1:
                # Retention took what lay between (nobody here could still need it: the
                # owner keeps what any subscription has not consumed).
                self._cache.clear()
                self._cache_bytes = 0
            self._cache.append(batch)
            self._cache_bytes += len(batch.payload)
            self.last_seq = batch.last_seq
            grew = True
        while self._cache_bytes > self._cache_limit and len(self._cache) > 1:
            self._cache_bytes -= len(self._cache.popleft().payload)
        if grew:
            self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = Flag()

    # talking to the owner ---------------------------------------------------------------------

    async def _request(
        self, after_seq: int, max_messages: int, max_bytes: int, wait_ms: int
    ) -> Messages:
        for _ in range(MAX_REDIRECTS + 1):
            conn = await self._connection()
            try:
                answer = await conn.request(
                    TailTopic(
                        request_id=conn.next_id(),
                        topic=self.topic,
                        after_seq=after_seq,
                        max_messages=max_messages,
                        max_bytes=max_bytes,
                        wait_ms=wait_ms,
                        redirected=self._redirected,
                    ),
                    wait_ms / 1000 + REQUEST_TIMEOUT_S,
                )
            except NotResponsibleError as exc:
                self._redirect(exc.owner)
                continue
            except TopicMovingError as exc:
                self._redirect(exc.destination)
                await self._clock.sleep(RETRY_MIN_S)
                continue
            if not isinstance(answer, Messages):
                raise LedgerError(f"unexpected answer to TAIL_TOPIC: {type(answer).__name__}")
            return answer
        raise TopicMovingError(f"topic {self.topic!r}: its owner keeps changing")

    def _redirect(self, owner: str | None) -> None:
        self._target, self._redirected = owner, owner is not None
        self._drop_connection()

    async def _connection(self) -> HubConnection:
        target = self._target
        if target is None:
            got = await self._store.ownership.read_owner_info(self.topic)
            if got is not None:
                target = got.value.address
                self._ownerless_since = None
            else:
                # Nobody owns it. Usually a hand-off is under way and its destination claims
                # in a few milliseconds: wait for it rather than make a hub claim by placement
                # (which would defeat the hand-off). Past OWNERLESS_WAIT_S (an owner that
                # crashed), ask ourselves, which claims or redirects as for any request.
                now = self._clock.monotonic()
                if self._ownerless_since is None:
                    self._ownerless_since = now
                if now - self._ownerless_since < OWNERLESS_WAIT_S:
                    raise TopicMovingError(f"topic {self.topic!r} has no owner at the moment")
                target = self._address
            self._target = target
        if self._conn is not None and not self._conn.closed and self._conn_target == target:
            return self._conn
        self._drop_connection()
        self._conn = await self._dialer.open(target, CONNECT_TIMEOUT_S)
        self._conn_target = target
        return self._conn

    def _drop_connection(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close()
        self._conn = None
