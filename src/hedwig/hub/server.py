"""The hub's TCP front end: bytes to frames to calls, and answers back.

Each connection wraps the sans-IO ``Connection``. Requests are handled concurrently (many in
flight per connection, answered as they finish, matched by request id). Publishes to a topic
the hub already serves skip the claim path and go straight to the log, in arrival order.

Bad input never takes the hub down: a malformed frame closes that one connection with a
logged reason; an oversized frame is skipped and answered MESSAGE_TOO_LARGE; a request that
fails is answered with its typed status.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import cast

from hedwig.errors import HedwigError, LedgerFencedError, NoSuchEntryError, ProtocolError
from hedwig.ledger.storage import StorageNode
from hedwig.protocol import status
from hedwig.protocol.connection import Connection, OversizedFrame, Role
from hedwig.protocol.frames import (
    AddEntry,
    CloseSubscription,
    Consume,
    DeleteLedger,
    Entry,
    Error,
    Frame,
    Lac,
    Ok,
    Ping,
    Publish,
    Read,
    ReadEntry,
    ReadLac,
    ReleaseTopic,
    Subscribe,
    TopicInfo,
    TopicStats,
    Unsubscribe,
)

log = logging.getLogger(__name__)

HIGH_WATER = 4 * 1024 * 1024

Handler = Callable[["ClientConnection", Frame], Awaitable[Frame | None]]


class ClientConnection(asyncio.Protocol):
    """One client connection; also the ``Peer`` that owned topics push frames to."""

    def __init__(self, hub: HubFrontEnd) -> None:
        self._hub = hub
        self._conn = Connection(Role.HUB, max_frame_size=hub.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self.name = "?"
        self.topics: set[str] = set()

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.set_write_buffer_limits(high=HIGH_WATER)
        peer = self._transport.get_extra_info("peername")
        self.name = f"{peer[0]}:{peer[1]}" if peer else "?"
        self._hub.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._writable.set()
        self._hub.connections.discard(self)
        self._hub.on_disconnect(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            self._conn.receive_data(data)
            frames = self._conn.next_frames()
        except ProtocolError as exc:
            log.warning("closing connection from %s: %s", self.name, exc)
            self.close()
            return
        for frame in frames:
            if isinstance(frame, OversizedFrame):
                self.send(
                    Error(
                        frame.request_id,
                        status.Status.MESSAGE_TOO_LARGE,
                        f"frame of {frame.size} bytes exceeds the limit of "
                        f"{self._conn.max_frame_size}",
                    )
                )
                continue
            self._hub.dispatch(self, frame)

    # Peer ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frame: Frame) -> None:
        if self._closed or self._transport is None:
            return
        self._transport.write(self._conn.send(frame))

    async def writable(self) -> None:
        await self._writable.wait()

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.close()


class HubFrontEnd:
    """Routes frames to the hub's operations and turns exceptions into ERROR frames."""

    def __init__(
        self,
        hub: HubOperations,
        *,
        max_frame_size: int,
        on_answer: Callable[[str, str], None] | None = None,
    ) -> None:
        self.ops = hub
        self.max_frame_size = max_frame_size
        self.connections: set[ClientConnection] = set()
        # Told (operation, status) for every answered request: the hedwig_requests metric.
        self._on_answer = on_answer or (lambda op, st: None)

    def protocol(self) -> ClientConnection:
        return ClientConnection(self)

    def on_disconnect(self, conn: ClientConnection) -> None:
        self.ops.disconnected(conn)

    def dispatch(self, conn: ClientConnection, frame: Frame) -> None:
        if isinstance(frame, Consume):
            # Consumes are frequent and need no I/O before their answer.
            try:
                self.ops.consume(conn, frame)
                conn.send(Ok(frame.request_id))
            except Exception as exc:
                conn.send(_error(frame, exc))
            return
        asyncio.get_running_loop().create_task(self._run(conn, frame))

    async def _run(self, conn: ClientConnection, frame: Frame) -> None:
        op = _OPS.get(type(frame), "other")
        try:
            answer = await self._handle(conn, frame)
        except Exception as exc:
            error = _error(frame, exc)
            conn.send(error)
            self._on_answer(op, _status_name(error.status))
            return
        if answer is not None:
            conn.send(answer)
        self._on_answer(op, "ok")

    async def _handle(self, conn: ClientConnection, frame: Frame) -> Frame | None:
        ops = self.ops
        if isinstance(frame, Publish):
            return await ops.publish(conn, frame)
        if isinstance(frame, Subscribe):
            return await ops.subscribe(conn, frame)
        if isinstance(frame, Unsubscribe):
            await ops.unsubscribe(conn, frame)
            return Ok(frame.request_id)
        if isinstance(frame, CloseSubscription):
            await ops.close_subscription(conn, frame)
            return Ok(frame.request_id)
        if isinstance(frame, Read):
            return await ops.read(conn, frame)
        if isinstance(frame, TopicStats):
            return await ops.topic_stats(conn, frame)
        if isinstance(frame, Ping):
            return Ok(frame.request_id)
        if isinstance(frame, ReleaseTopic):
            await ops.release_topic(conn, frame)
            return Ok(frame.request_id)
        # The storage role: ledger replicas for other hubs' topics.
        storage = ops.storage
        if isinstance(frame, AddEntry):
            await storage.add_entry(
                frame.ledger_id, frame.entry_id, frame.lac, frame.payload, recovery=frame.recovery
            )
            return Ok(frame.request_id)
        if isinstance(frame, ReadEntry):
            return Entry(
                frame.request_id, await storage.read_entry(frame.ledger_id, frame.entry_id)
            )
        if isinstance(frame, ReadLac):
            lac, last = await storage.read_lac(frame.ledger_id, fence=frame.fence)
            return Lac(frame.request_id, lac, last)
        if isinstance(frame, DeleteLedger):
            await storage.delete_ledger(frame.ledger_id)
            return Ok(frame.request_id)
        raise status.InvalidRequestError(f"unexpected frame {type(frame).__name__}")


_OPS: dict[type, str] = {
    Publish: "publish",
    Subscribe: "subscribe",
    Unsubscribe: "unsubscribe",
    CloseSubscription: "close_subscription",
    Read: "read",
    TopicStats: "topic_stats",
    ReleaseTopic: "release_topic",
    Ping: "ping",
    AddEntry: "add_entry",
    ReadEntry: "read_entry",
    ReadLac: "read_lac",
    DeleteLedger: "delete_ledger",
}


def _status_name(code: int) -> str:
    try:
        return status.Status(code).name.lower()
    except ValueError:
        return str(code)


def _error(frame: Frame, exc: BaseException) -> Error:
    rid = getattr(frame, "request_id", 0)
    if isinstance(exc, status.ServerError):
        return Error(rid, int(exc.status), str(exc), exc.detail)
    if isinstance(exc, LedgerFencedError):
        return Error(rid, status.Status.LEDGER_FENCED, str(exc))
    if isinstance(exc, NoSuchEntryError):
        return Error(rid, status.Status.NO_SUCH_ENTRY, str(exc))
    if isinstance(exc, HedwigError):
        return Error(rid, status.Status.SERVICE_UNAVAILABLE, f"{type(exc).__name__}: {exc}")
    log.exception("internal error handling %s", type(frame).__name__, exc_info=exc)
    return Error(rid, status.Status.INTERNAL_ERROR, f"internal error: {type(exc).__name__}")


class HubOperations:
    """What the front end calls; implemented by ``hedwig.hub.app.Hub``."""

    storage: StorageNode

    async def publish(self, conn: ClientConnection, req: Publish) -> Frame:
        raise NotImplementedError

    async def subscribe(self, conn: ClientConnection, req: Subscribe) -> Frame:
        raise NotImplementedError

    def consume(self, conn: ClientConnection, req: Consume) -> None:
        raise NotImplementedError

    async def unsubscribe(self, conn: ClientConnection, req: Unsubscribe) -> None:
        raise NotImplementedError

    async def close_subscription(self, conn: ClientConnection, req: CloseSubscription) -> None:
        raise NotImplementedError

    async def read(self, conn: ClientConnection, req: Read) -> Frame:
        raise NotImplementedError

    async def topic_stats(self, conn: ClientConnection, req: TopicStats) -> TopicInfo:
        raise NotImplementedError

    async def release_topic(self, conn: ClientConnection, req: ReleaseTopic) -> None:
        raise NotImplementedError

    def disconnected(self, conn: ClientConnection) -> None:
        raise NotImplementedError
