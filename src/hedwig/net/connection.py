"""One client connection to one hub: requests matched to answers by id, events routed out."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import cast

from hedwig.errors import ConnectionLostError, ProtocolError
from hedwig.protocol.connection import Connection, OversizedFrame, Role
from hedwig.protocol.frames import (
    Deliver,
    Error,
    Frame,
    Ping,
    SubscriptionForcedClosed,
    TopicMoved,
)
from hedwig.protocol.status import error_for_status

log = logging.getLogger(__name__)

# A silent hub is pinged after KEEPALIVE_S and dropped if it does not answer in
# KEEPALIVE_TIMEOUT_S: a frozen hub is noticed within about 3 s.
KEEPALIVE_S = 1.0
KEEPALIVE_TIMEOUT_S = 2.0

Event = Deliver | TopicMoved | SubscriptionForcedClosed
# What a request can be answered with: an answer too large for this connection is skipped and
# arrives as its ``OversizedFrame`` header.
Answer = Frame | OversizedFrame


class HubConnection(asyncio.Protocol):
    def __init__(
        self,
        address: str,
        on_event: Callable[[HubConnection, Event], None],
        on_close: Callable[[HubConnection], None],
    ) -> None:
        self.address = address
        self._on_event = on_event
        self._on_close = on_close
        self._conn = Connection(Role.CLIENT, max_frame_size=64 * 1024 * 1024)
        self._transport: asyncio.Transport | None = None
        self._pending: dict[int, asyncio.Future[Answer]] = {}
        self._ids = itertools.count(1)
        self._writable = asyncio.Event()
        self._writable.set()
        self.closed = False
        self._last_heard = 0.0
        self._keepalive: asyncio.Task[None] | None = None

    @classmethod
    async def open(
        cls,
        address: str,
        on_event: Callable[[HubConnection, Event], None],
        on_close: Callable[[HubConnection], None],
        timeout: float = 5.0,
    ) -> HubConnection:
        host, _, port = address.rpartition(":")
        loop = asyncio.get_running_loop()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: cls(address, on_event, on_close), host, int(port)),
                timeout,
            )
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConnectionLostError(f"cannot connect to hub {address}: {exc}") from exc
        return proto

    def next_id(self) -> int:
        return next(self._ids) & 0xFFFFFFFF or next(self._ids)

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        loop = asyncio.get_running_loop()
        self._last_heard = loop.time()
        self._keepalive = loop.create_task(self._keep_alive())

    async def _keep_alive(self) -> None:
        """Ping a hub that has been silent for KEEPALIVE_S; drop it if it stays silent.

        A frozen or partitioned hub keeps its TCP connections open, so without this a client
        would wait for it until a request timed out, and a subscriber forever. With it, the
        connection fails within KEEPALIVE_S + KEEPALIVE_TIMEOUT_S and the client moves on.
        """
        loop = asyncio.get_running_loop()
        while not self.closed:
            await asyncio.sleep(KEEPALIVE_S)
            if loop.time() - self._last_heard < KEEPALIVE_S or self.closed:
                continue
            try:
                fut = self.send_nowait(Ping(self.next_id()))
                await asyncio.wait_for(fut, KEEPALIVE_TIMEOUT_S)
            except (TimeoutError, ConnectionLostError):
                if not self.closed:
                    log.warning("hub %s stopped answering; dropping the connection", self.address)
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
        self._last_heard = asyncio.get_running_loop().time()
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
            rid = getattr(frame, "request_id", 0)
            fut = self._pending.pop(rid, None)
            if fut is not None and not fut.done():
                if isinstance(frame, OversizedFrame):
                    fut.set_exception(
                        ProtocolError(f"answer of {frame.size} bytes exceeds the client's limit")
                    )
                else:
                    fut.set_result(frame)

    # requests -----------------------------------------------------------------------------

    def send_nowait(self, frame: Frame) -> asyncio.Future[Answer]:
        if self.closed or self._transport is None:
            raise ConnectionLostError(f"connection to hub {self.address} is closed")
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[getattr(frame, "request_id")] = fut  # noqa: B009
        self._transport.write(self._conn.send(frame))
        return fut

    async def request(self, frame: Frame, timeout: float | None = 30.0) -> Answer:
        """Send and wait for the answer; ERROR answers raise their typed ``ServerError``."""
        await self._writable.wait()
        fut = self.send_nowait(frame)
        try:
            answer = await asyncio.wait_for(fut, timeout)
        except TimeoutError:
            self._pending.pop(getattr(frame, "request_id"), None)  # noqa: B009
            raise ConnectionLostError(f"hub {self.address} did not answer in {timeout}s") from None
        if isinstance(answer, Error):
            raise error_for_status(answer.status, answer.message, answer.detail)
        return answer

    def close(self) -> None:
        if self._transport is not None and not self.closed:
            self._transport.close()
