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
import ssl
from collections.abc import Callable
from typing import cast

from hedwig.clock import Clock, SystemClock
from hedwig.errors import (
    ConnectionLostError,
    HedwigError,
    ProtocolError,
    TlsClosedError,
    TlsError,
)
from hedwig.net.coalescing import TurnWriter
from hedwig.net.transport import TCP, Network
from hedwig.protocol import (
    Authenticate,
    Authenticated,
    Connection,
    Deliver,
    Error,
    Event,
    LanesChanged,
    OversizedFrame,
    Ping,
    Redeliver,
    RefusedFrame,
    Reply,
    Request,
    Role,
    SubscriptionForcedClosed,
    SubscriptionMoved,
    TopicMoved,
    error_from_frame,
)
from hedwig.protocol.security_frames import TOKEN
from hedwig.security.credentials import Credentials

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
# A TLS connection the hub closes this soon after it was made, before sending a byte, was
# refused for this end's certificate: TLS 1.3 checks a client certificate after the client has
# finished its handshake, and the refusing side closes without an alert reaching us.
REFUSED_WITHIN_S = 1.0
# A connection authenticated with a token authenticates again, with the token as it is then,
# after this share of the token's remaining lifetime (a projected token is renewed by the
# kubelet at 80 % of its life).
REAUTHENTICATE_AT = 0.8

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
        self._reauth: asyncio.Task[None] | None = None
        self._heard_any = False
        self._made_at = 0.0
        # Who the hub says this connection is (after ``authenticate``).
        self.principal: str | None = None

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
        credentials: Credentials | None = None,
    ) -> HubConnection:
        """Connect, and authenticate with ``credentials`` if given; ``ConnectionLostError`` if
        the hub cannot be reached in ``timeout`` s, ``TlsError`` if TLS fails,
        ``AuthenticationError`` if the hub refuses the credentials."""
        clk = clock or SystemClock()
        conn = await network.connect(
            address, lambda: cls(address, on_event, on_close, clk), timeout_s=timeout
        )
        if credentials is not None:
            try:
                await conn.authenticate(credentials, timeout)
            except BaseException:
                conn.close()
                raise
        return conn

    async def authenticate(self, credentials: Credentials, timeout: float) -> None:
        """Prove who this connection is; then again before the token expires."""
        answer = await self._authenticate_once(credentials, timeout)
        self.principal = answer.principal
        if answer.expires_ms and self._reauth is None:
            self._reauth = asyncio.get_running_loop().create_task(
                self._reauthenticate(credentials, answer.expires_ms, timeout)
            )

    async def _authenticate_once(self, credentials: Credentials, timeout: float) -> Authenticated:
        answer = await self.request(
            Authenticate(
                request_id=self.next_id(), mechanism=TOKEN, credentials=credentials.token()
            ),
            timeout,
        )
        assert isinstance(answer, Authenticated)
        return answer

    async def _reauthenticate(
        self, credentials: Credentials, expires_ms: int, timeout: float
    ) -> None:
        while not self.closed:
            left_s = max(0.0, expires_ms / 1000 - self._clock.wall_ms() / 1000)
            await self._clock.sleep(max(1.0, left_s * REAUTHENTICATE_AT))
            if self.closed:
                return
            try:
                answer = await self._authenticate_once(credentials, timeout)
            except HedwigError as exc:
                log.warning("re-authenticating to hub %s failed: %s", self.address, exc)
                return
            if not answer.expires_ms:
                return
            expires_ms = answer.expires_ms

    def next_id(self) -> int:
        return next(self._ids) & 0xFFFFFFFF or next(self._ids)

    # asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._writer = TurnWriter(self._transport)
        self._last_heard = self._made_at = self._clock.monotonic()
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
        if self._reauth is not None:
            self._reauth.cancel()
        self._writable.set()
        err: HedwigError = ConnectionLostError(f"connection to hub {self.address} lost")
        if isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
            if not self._heard_any:
                err = TlsClosedError(
                    f"hub {self.address} closed the TLS connection as soon as it was made: it "
                    f"does not accept this end's certificate, or it went away ({exc})"
                )
            # Else a hub that went away mid-stream: the connection was lost, nothing more.
        elif isinstance(exc, ssl.SSLError):
            # The hub refused what this end presented (its certificate) after the handshake.
            err = TlsError(f"hub {self.address} closed the TLS connection: {exc}")
        elif (
            not self._heard_any
            and self._transport is not None
            and self._transport.get_extra_info("ssl_object") is not None
            and self._clock.monotonic() - self._made_at < REFUSED_WITHIN_S
        ):
            err = TlsClosedError(
                f"hub {self.address} closed the TLS connection as soon as it was made: it does "
                "not accept this end's certificate (one from another CA, or none where one is "
                "required), or it went away"
            )
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
        self._heard_any = True
        try:
            self._conn.receive_data(data)
            frames = self._conn.next_frames()
        except ProtocolError as exc:
            log.error("hub %s broke the protocol: %s", self.address, exc)
            self.close()
            return
        for frame in frames:
            if isinstance(
                frame,
                Deliver
                | Redeliver
                | TopicMoved
                | SubscriptionForcedClosed
                | SubscriptionMoved
                | LanesChanged,
            ):
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
        self._writer.write(self._conn.send(frame))
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
            self._writer.flush()
            self._transport.close()
