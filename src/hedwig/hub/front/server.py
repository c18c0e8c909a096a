"""The hub's front end: bytes to frames to calls, answers back, and the one error boundary.

Each connection wraps the sans-IO ``Connection``. Requests are handled concurrently (many in
flight per connection, answered as they finish, matched by request id); what each request does
is ``hedwig.hub.requests.routes``.

This is the only place where a failed request becomes an ERROR answer: the exception goes
through the table in ``hedwig.protocol.status``; one that no row covers is a bug, logged here
with its cause and answered INTERNAL_ERROR, which clients do not retry.

A front end serves one listener. The external client listener's front rewrites what it sends
so that every hub is named by the address an external client reaches it at
(``hedwig.hub.front.outward``); the others send frames as they are.

Before anything is served, ``hedwig.hub.front.access`` admits the request (authentication,
authorization, the closed hub-to-hub plane); a refusal is answered like any other error.

Bad input never takes the hub down: a malformed frame closes that one connection with a logged
reason (counted, and summed up past a few a minute: ``hedwig.hub.front.doorway.ClosureLog``);
an oversized frame is skipped and answered MESSAGE_TOO_LARGE; a batch whose count lies is
answered INVALID_REQUEST; the connection stays open for both. Until a connection has
authenticated, on a hub with authentication on, the doorway (``hedwig.hub.front.doorway``)
bounds its frames, its time and the number of such connections.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol, cast

from hedwig.clock import Clock
from hedwig.errors import MessageTooLargeError, ProtocolError
from hedwig.hub.front import audit
from hedwig.hub.front.access import ListenerRole
from hedwig.hub.front.admission import Admission
from hedwig.hub.front.doorway import Door, Sweeper
from hedwig.hub.front.memory import MemoryRelease
from hedwig.hub.front.tls import AnyHub, PeerCheck
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.hub.reporting.events import HubEvents
from hedwig.metadata.acls import Operation
from hedwig.net.coalescing import TurnWriter
from hedwig.protocol import (
    Authenticate,
    Connection,
    Consume,
    Error,
    Frame,
    Ok,
    OversizedFrame,
    RefusedFrame,
    Reply,
    Request,
    Role,
)
from hedwig.protocol.status import error_frame, internal_error_frame, status_label
from hedwig.security.principal import ANONYMOUS, Principal, PrincipalKind
from hedwig.security.tls import principal_from_certificate

log = logging.getLogger(__name__)

HIGH_WATER = 4 * 1024 * 1024


class RequestHandler(Protocol):
    """What the front end calls; ``hedwig.hub.requests.routes.HubRequests`` implements it."""

    async def handle(self, conn: ClientConnection, frame: Request) -> Reply | None:
        """Serve one request; its answer (``None``: OK). Raises what the table maps."""
        ...

    def consume(self, conn: ClientConnection, frame: Consume) -> None:
        """A consume: needs no I/O before its answer, so it is served inline."""
        ...

    def disconnected(self, conn: ClientConnection) -> None: ...


class Outward(Protocol):
    """What frames become on their way out of a listener (``hedwig.hub.front.outward``)."""

    async def prepare(self, frame: Frame) -> None:
        """Get ready to rewrite ``frame`` (an answer: it may wait)."""
        ...

    def rewrite(self, frame: Frame) -> Frame: ...


class AsAddressed:
    """The ``Outward`` of a listener inside the hubs' network: frames go as they are."""

    async def prepare(self, frame: Frame) -> None:
        return None

    def rewrite(self, frame: Frame) -> Frame:
        return frame


AS_ADDRESSED = AsAddressed()


class ClientConnection(asyncio.Protocol):
    """One connection to the hub; also the ``Peer`` that owned topics push frames to."""

    def __init__(self, front: HubFrontEnd) -> None:
        self._front = front
        self._conn = Connection(Role.HUB, max_frame_size=front.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._closed = False
        self.name = "?"
        self.peer_host = ""
        # While unauthenticated (``hedwig.hub.front.doorway``): whether the doorway watches
        # this connection, when the frame it is in the middle of began, why it was closed.
        self._door = front.doorway
        self._watched = False
        self.incomplete_since: float | None = None
        self.closed_for: Disconnect | None = None
        self._refusals = 0
        # Bytes of an unfinished frame, once authenticated (the doorway bounds them).
        self._holding = 0
        # The topics this connection published or subscribed to, for its disconnection to
        # detach it from each; None once there were more than ``TOPICS_KEPT`` (its
        # disconnection looks at every owned topic instead: a client publishing to 100,000
        # topics kept about 100 bytes per topic here for as long as it was connected).
        self.topics: set[str] | None = set()
        # Access control (``hedwig.hub.front.access``): which listener, who, and cached decisions.
        self.role = front.role
        self._principal: Principal = ANONYMOUS
        self.decisions: dict[tuple[Operation, str], bool] = {}
        self.acl_generation = -1
        self.audit = audit.AuditBudget(front.clock)

    @property
    def principal(self) -> Principal:
        return self._principal

    @principal.setter
    def principal(self, principal: Principal) -> None:
        """Who the connection is; once it has an identity the doorway's bounds are lifted."""
        self._principal = principal
        if self._watched and not principal.anonymous:
            self._watched = False
            self.incomplete_since = None
            self._door.identified(self)
            self._conn.max_frame_size = self._front.max_frame_size

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport.set_write_buffer_limits(high=HIGH_WATER)
        self._writer = TurnWriter(self._transport)
        peer = self._transport.get_extra_info("peername")
        self.name = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.peer_host = str(peer[0]) if peer else ""
        if not self._identify(self._transport.get_extra_info("peercert")):
            return
        limit = self._door.frame_limit
        if limit is not None and self._principal.anonymous:
            if not self._door.arrived(self):
                return  # too many unauthenticated connections: closed already
            self._watched = True
            self._conn.max_frame_size = min(limit, self._front.max_frame_size)
        self._front.connections.add(self)

    def _identify(self, peercert: dict[str, object] | None) -> bool:
        """A verified certificate names the principal (TLS checked it against the CA); False
        if the peer was closed instead (on the internal listener, a key not pinned)."""
        if self.role is ListenerRole.INTERNAL:
            # Only a hub of the region gets past the internal listener's handshake, and its
            # key check (on an in-memory network, in tests, every peer is a hub).
            if not self._front.internal_peers.admits(self._peer_certificate()):
                self.closed_for = Disconnect.PEER_KEY
                self._door.closures.closed(
                    self,
                    Disconnect.PEER_KEY,
                    "its certificate is from the hub CA but its key is none this hub pins "
                    "(internal_peer_keys)",
                )
                self.abort()
                return False
            name = principal_from_certificate(peercert) or "memory"
            self.principal = Principal(f"hub:{name}", PrincipalKind.HUB)
            return True
        named = principal_from_certificate(peercert)
        if named is not None:
            self.principal = Principal(named, PrincipalKind.CERTIFICATE)
        return True

    def _peer_certificate(self) -> bytes | None:
        assert self._transport is not None
        tls = self._transport.get_extra_info("ssl_object")
        if tls is None:
            return None
        der: bytes | None = tls.getpeercert(binary_form=True)
        return der

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._writable.set()
        if self._watched:
            self._watched = False
            self._door.left(self)
        if self._holding:
            self._door.released(self)
        audit.closed(self, self._principal.name)
        self._front.connections.discard(self)
        self._front.handler.disconnected(self)

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        try:
            self._conn.receive_data(data)
            frames = self._conn.next_frames()
        except ProtocolError as exc:
            # The reason as text: a log record (kept by a handler that buffers) holding the
            # exception would hold its traceback, this frame, and so this connection.
            drop_tracebacks(exc)
            if self.closed_for is None:
                self.closed_for = Disconnect.MALFORMED
                self._door.closures.closed(self, Disconnect.MALFORMED, str(exc))
            self.close()
            return
        if self._watched:
            if not self._conn.pending_bytes:
                self.incomplete_since = None
            elif self.incomplete_since is None:
                self.incomplete_since = self._front.clock.monotonic()
        elif self._holding or self._conn.pending_bytes:
            self._holding = self._conn.pending_bytes
            self._door.holding(self, self._principal.name, self._holding, bool(frames))
        for frame in frames:
            if self.closed_for is not None:
                break  # closed by the hub: what follows is not served
            if isinstance(frame, OversizedFrame):
                limit = self._conn.max_frame_size
                before = " before authenticating" if self._watched else ""
                self._front.refuse(
                    self,
                    frame.request_id,
                    MessageTooLargeError(
                        f"frame of {frame.size} bytes exceeds the limit of {limit}{before}",
                        size=frame.size,
                        limit=limit,
                    ),
                )
            elif isinstance(frame, RefusedFrame):
                self._front.refuse(self, frame.request_id, frame.error)
            else:
                self._front.dispatch(self, cast(Request, frame))

    # Peer ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def send(self, frame: Frame) -> None:
        if self._closed or self._transport is None:
            return
        self._writer.write(self._conn.send(frame))

    def refused(self, answer: Error) -> None:
        """Send the refusal ``answer``; an unauthenticated connection is closed after a few."""
        self.send(answer)
        if self._watched:
            self._refusals += 1
            self._door.refused(self, self._refusals)

    async def writable(self) -> None:
        await self._writable.wait()

    def close(self) -> None:
        if self._transport is not None and not self._closed:
            self._writer.flush()
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None and not self._closed:
            self._transport.abort()


class RewritingConnection(ClientConnection):
    """A connection of a listener whose clients are outside the hubs' network: every frame it
    sends names hubs as its front end's ``Outward`` rewrites them
    (``hedwig.hub.front.outward``)."""

    def send(self, frame: Frame) -> None:
        super().send(self._front.outward.rewrite(frame))


class HubFrontEnd:
    """Routes requests to the handler and answers them, errors through the status table."""

    def __init__(
        self,
        handler: RequestHandler,
        *,
        max_frame_size: int,
        events: HubEvents,
        admission: Admission,
        doorway: Door,
        clock: Clock,
        role: ListenerRole = ListenerRole.CLIENT,
        internal_peers: PeerCheck | None = None,
        outward: Outward | None = None,
    ) -> None:
        self.handler = handler
        self.max_frame_size = max_frame_size
        self.connections: set[ClientConnection] = set()
        self._events = events
        self._admission = admission
        self.doorway = doorway
        self.clock = clock
        self.role = role
        # Whether a peer of the internal listener is a hub (``hedwig.hub.front.tls``).
        self.internal_peers: PeerCheck = internal_peers or AnyHub()
        # What a frame becomes on its way out (the external listener's names): answers are
        # prepared by it, and the listener's connections rewrite every frame they send (the
        # choice made here, once, so that an internal connection's send costs nothing more).
        self.outward: Outward = outward or AS_ADDRESSED
        self._connection: type[ClientConnection] = (
            ClientConnection if outward is None else RewritingConnection
        )
        # Connections begun (the listener's calls of ``protocol``, before their TLS handshake).
        # Those no longer open are gone, a handshake that failed included (it never opened):
        # a flood of them is memory to give back. Handshakes that failed were most of a flood
        # on a loaded machine, and counted by ``connection_lost`` alone they never made one.
        self.begun = 0
        self._sweeper = Sweeper(
            doorway,
            clock,
            gone=lambda: self.begun - len(self.connections),
            release=MemoryRelease(clock),
        )

    def twin(self, outward: Outward) -> HubFrontEnd:
        """A front end for another listener of the same requests, admission and doorway
        (swept by this one), whose frames become ``outward``'s on their way out."""
        return HubFrontEnd(
            self.handler,
            max_frame_size=self.max_frame_size,
            events=self._events,
            admission=self._admission,
            doorway=self.doorway,
            clock=self.clock,
            role=self.role,
            outward=outward,
        )

    def start_sweeping(self) -> None:
        """Check the unauthenticated connections' deadlines every second from now on."""
        self._sweeper.start()

    def stop_sweeping(self) -> None:
        self._sweeper.stop()

    def protocol(self) -> ClientConnection:
        self.begun += 1
        return self._connection(self)

    def dispatch(self, conn: ClientConnection, frame: Request) -> None:
        try:
            self._admission.admit(conn, frame, type(frame).LABEL)
        except Exception as exc:
            conn.refused(self._error(frame, exc))
            return
        if isinstance(frame, Consume):
            # Consumes are frequent and need no I/O before their answer.
            try:
                self.handler.consume(conn, frame)
            except Exception as exc:
                conn.refused(self._error(frame, exc))
                return
            conn.send(Ok(request_id=frame.request_id))
            return
        asyncio.get_running_loop().create_task(self._run(conn, frame))

    def refuse(self, conn: ClientConnection, request_id: int, exc: Exception) -> None:
        """Answer a request the connection could not even decode (too large, lying batch)."""
        conn.refused(self._error_answer(request_id, "undecoded", exc))

    async def _run(self, conn: ClientConnection, frame: Request) -> None:
        try:
            if isinstance(frame, Authenticate):
                answer: Reply | None = await self._admission.authenticate_with(conn, frame)
            else:
                answer = await self.handler.handle(conn, frame)
        except Exception as exc:
            refusal = self._error(frame, exc)
            await self.outward.prepare(refusal)
            conn.refused(refusal)
            return
        if answer is not None:
            await self.outward.prepare(answer)
        conn.send(answer if answer is not None else Ok(request_id=frame.request_id))
        self._events.answered(type(frame).LABEL, "ok")

    def _error(self, frame: Request, exc: Exception) -> Error:
        return self._error_answer(frame.request_id, type(frame).LABEL, exc)

    def _error_answer(self, request_id: int, op: str, exc: Exception) -> Error:
        answer = error_frame(request_id, exc)
        if answer is None:
            log.error("internal error handling %s", op, exc_info=exc)
            answer = internal_error_frame(request_id, exc)
        self._events.answered(op, status_label(answer.status))
        drop_tracebacks(exc)
        return answer


def drop_tracebacks(exc: BaseException) -> None:
    """Let go of an answered exception's tracebacks (and those of the exceptions it was
    raised from or during).

    A traceback holds the frames it went through, and a frame that kept the exception (a
    future shared by the requests for a topic being claimed holds the claim's failure) closes
    a cycle, which reference counting cannot free: during a failover a survivor redirects
    thousands of requests a second, and a fifth of the objects the cycle collector walked
    were those frames, tracebacks and requests. Once the answer is made nothing reads them."""
    seen = 0
    current: BaseException | None = exc
    while current is not None and seen < 8:
        current.__traceback__ = None
        current = current.__cause__ or current.__context__
        seen += 1
