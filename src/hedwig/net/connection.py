"""One connection to one hub: requests matched to answers by id, events routed out.

Used by the client library and by hubs talking to each other (storage replicas, claim
requests). It wraps the sans-IO ``hedwig.protocol.Connection`` in an ``asyncio.Protocol``; the
``Network`` it is opened on decides whether bytes go over TCP or stay in memory, and every wait
(connecting, answers, keepalive) runs on the injected clock.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import cast

from hedwig.clock import Clock, SystemClock
from hedwig.errors import ConnectionLostError, ProtocolError
from hedwig.net.transport import TCP, Network
from hedwig.protocol import (
    Connection,
    Deliver,
    Error,
    Event,
    OversizedFrame,
    Ping,
    RefusedFrame,
    Reply,
    Request,
    Role,
    SubscriptionForcedClosed,
    TopicMoved,
    error_from_frame,
)

log = logging.getLogger(__name__)

# A silent hub is pinged after KEEPALIVE_S and dropped if it does not answer in
# KEEPALIVE_TIMEOUT_S: a frozen hub is noticed within about 3 s. Silence is checked every
# KEEPALIVE_CHECK_S, so the ping goes out soon after KEEPALIVE_S, not up to twice that.
KEEPALIVE_S = 1.0
KEEPALIVE_TIMEOUT_S = 2.0
KEEPALIVE_CHECK_S = 0.25
CONNECT_TIMEOUT_S = 5.0
# Answers can be large (a READ of many batches).
MAX_ANSWER_BYTES = 64 * 1024 * 1024

EventHandler = Callable[["HubConnection", Event], None]
CloseHandler = Callable[["HubConnection"], None]


def _ignore_event(conn: HubConnection, event: Event) -> None:
    return None


def _ignore_close(conn: HubConnection) -> None:
    return None


class HubConnection(asyncio.Protocol):
    def __init__(
        self,
        address: str,
        on_event: EventHandler,
        on_close: CloseHandler,
        clock: Clock,
    ) -> None:
        self.address = address
        self._on_event = on_event
        self._on_close = on_close
        self._clock = clock
        self._conn = Connection(Role.CLIENT, max_frame_size=MAX_ANSWER_BYTES)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._ids = itertools.count(1)
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False
        # Dropped because the hub stopped answering pings (frozen, or cut off), not closed.
        self.went_silent = False
        self._last_heard = 0.0
        self._keepalive: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        address: str,
        on_event: EventHandler = _ignore_event,
        on_close: CloseHandler = _ignore_close,
        *,
        network: Network = TCP,
        clock: Clock | None = None,
        timeout: float = CONNECT_TIMEOUT_S,
    ) -> HubConnection:
        """Connect; ``ConnectionLostError`` if the hub cannot be reached in ``timeout`` s."""
        clk = clock or SystemClock()
        return await network.connect(
            address, lambda: cls(address, on_event, on_close, clk), timeout_s=timeout
        )

    def next_id(self) -> int:
        return next(self._ids) & 0xFFFFFFFF or next(self._ids)

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._last_heard = self._clock.monotonic()
        self._keepalive = asyncio.get_running_loop().create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        """Ping a hub that has been silent for KEEPALIVE_S; drop it if it stays silent.

        A frozen or partitioned hub keeps its TCP connections open, so without this a client
        would wait for it until a request timed out, and a subscriber forever. With it, the
        connection fails within KEEPALIVE_S + KEEPALIVE_TIMEOUT_S and the client moves on.
        """
        while not self.closed:
            await self._clock.sleep(KEEPALIVE_CHECK_S)
            if self._clock.monotonic() - self._last_heard < KEEPALIVE_S or self.closed:
                continue
            try:
                fut = self.send_nowait(Ping(request_id=self.next_id()))
                await self._clock.wait_for(fut, KEEPALIVE_TIMEOUT_S)
            except (TimeoutError, ConnectionLostError):
                if not self.closed:
                    log.warning("hub %s stopped answering; dropping the connection", self.address)
                    self.went_silent = True
                    if self._transport is not None:
                        self._transport.abort()
                return

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._keepalive is not None:
            self._keepalive.cancel()
        self._writable.set()
        err = ConnectionLostError(f"connection to hub {self.address} lost")
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        self._on_close(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        self._last_heard = self._clock.monotonic()
        try:
            self._conn.receive_data(data)
            frames = self._conn.next_frames()
        except ProtocolError as exc:
            log.error("hub %s broke the protocol: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            if isinstance(frame, Deliver | TopicMoved | SubscriptionForcedClosed):
                self._on_event(self, frame)
                continue
            fut = self._pending.pop(frame.request_id, None)
            if fut is None or fut.done():
                continue
            if isinstance(frame, OversizedFrame):
                fut.set_exception(
                    ProtocolError(f"answer of {frame.size} bytes exceeds the client's limit")
                )
            elif isinstance(frame, RefusedFrame):  # pragma: no cover - clients raise instead
                fut.set_exception(frame.error)
            else:
                fut.set_result(cast(Reply, frame))

    # requests -----------------------------------------------------------------------------

    def send_nowait(self, frame: Request) -> asyncio.Future[Reply]:
        """Send ``frame``; the future resolves with its answer (an ``Error`` as it came)."""
        if self.closed or self._transport is None:
            raise ConnectionLostError(f"connection to hub {self.address} is closed")
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[frame.request_id] = fut
        self._transport.write(self._conn.send(frame))
        return fut

    async def request(self, frame: Request, timeout: float | None = 30.0) -> Reply:
        """Send and wait for the answer; an ERROR answer raises its exception."""
        await self._writable.wait()
        fut = self.send_nowait(frame)
        try:
            answer = await self._clock.wait_for(fut, timeout)
        except TimeoutError:
            self._pending.pop(frame.request_id, None)
            raise ConnectionLostError(f"hub {self.address} did not answer in {timeout}s") from None
        if isinstance(answer, Error):
            raise error_from_frame(answer)
        return answer

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()
