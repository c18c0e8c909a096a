"""The connection to etcd (its v3 gRPC API): channels, credentials and tokens, and etcd's errors
as ours.

The client library: ``aetcd`` from PyPI, which works with Python 3.11 and etcd 3.6 (checked by
the conformance suite against a real etcd) and ships etcd's protocol definitions compiled for
``grpc.aio``. We use those generated stubs (``aetcd.rpc``) over channels of our own rather than
its ``Client``, which opens plaintext channels only (no TLS: security is on by default here) and
cannot page a range (listing a million topics must not be one response). Everything else
(compare-and-set transactions, leases, watches) is a handful of RPCs, wrapped here; gRPC errors
become ``MetadataUnavailableError`` (retry later) or ``MetadataError`` in this module, and no
other module of Hedwig sees one (nor imports ``grpc``: the package's import contract).

Two channels, each a connection of its own: the lease's refreshes get one to themselves, so
that queued behind thousands of writes (a burst of claims) they cannot arrive after the TTL and
take every owner record of the hub with the lease. gRPC waits longer and longer between
attempts to reconnect, up to two minutes by default: after an etcd outage of a minute or so
every hub would stay cut off for another one, its session lost meanwhile, so the waits are
``RECONNECT_BACKOFF_MS`` (two seconds at most). A connection gets ``CONNECT_TIMEOUT_MS`` to be
set up (TCP, TLS, HTTP/2's settings).

**Credentials are kept, tokens renewed.** With etcd's authentication on, the connection trades
``USER:PASSWORD`` for a token once and sends the token with every call. etcd forgets its
tokens when it restarts (and a JWT token expires, and a token from before a change of users or
roles is refused as old): a call refused for its token makes the connection authenticate
again, once for every caller waiting, and the call is sent again. A wrong password or a missing
permission is a ``MetadataError`` at once, never retried. Credentials with a source
(``EtcdCredentials.source``: a mounted Secret's file, the operator's Secret through the API) are
read again at each authentication, so a rotated password is picked up when etcd refuses the old
token (changing a user's password makes etcd refuse the tokens issued before); a refusal then
is retriable (the file may not show the new password yet), not the hard error it is at start.

Timeouts given to gRPC are deadlines computed from the injected clock (``hedwig.clock``); the
waits of the session and the watches are on that clock too (``session``, ``watch_stream``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import grpc  # type: ignore[import-untyped]
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.clock import Clock
from hedwig.errors import MetadataError, MetadataRefusedError, MetadataUnavailableError

log = logging.getLogger(__name__)

# Each call gives up after this long (the session's own clock decides when it is lost).
CALL_TIMEOUT_S = 10.0
# Between attempts to reach etcd again after it went away (first, longest), in milliseconds.
RECONNECT_BACKOFF_MS = (200, 2_000)
# How long one attempt may take to connect (TCP, TLS, HTTP/2's settings), in milliseconds.
# gRPC takes it from ``grpc.min_reconnect_backoff_ms``: its MIN_CONNECT_TIMEOUT
# (doc/connection-backoff.md), not a pause. It was set to the first pause, 200 ms: on a link
# a second slow each way the first attempts timed out before etcd's settings came, failing
# every call that waited on them, and on one slower than the longest pause (2 s) all did, so
# a slow etcd looked like a lost one.
CONNECT_TIMEOUT_MS = 5_000

# Where ``USER:PASSWORD`` is read from at each authentication (None: keep the last ones).
CredentialsSource = Callable[[], Awaitable[str | None]]
# The token sent with every call, as gRPC metadata (None: etcd's authentication is off).
Token = tuple[tuple[str, str], ...] | None


@dataclass(frozen=True, slots=True)
class EtcdCredentials:
    """What this client shows a secured etcd, handed as one from the store down to here: a user
    (``username``/``password``, for etcd's own authentication; None: authentication is off),
    the CA of etcd's certificate (``ca``: TLS is on when it is given) and a client certificate
    (``cert``/``key``) if etcd asks for one, and where the password is read again at each
    authentication (``source``; None: keep the last one)."""

    username: str | None = None
    password: str | None = None
    ca: bytes | None = None
    cert: bytes | None = None
    key: bytes | None = None
    source: CredentialsSource | None = None


# An etcd with its authentication and TLS off (a development one).
NO_CREDENTIALS = EtcdCredentials()

# A refusal of this client's credentials or rights: the same call is refused again.
_REFUSED = {grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED}

_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
}

# etcd's answers to a token it no longer accepts (``rpctypes.ErrGRPCInvalidAuthToken``,
# ``ErrGRPCAuthOldRevision``): authenticate again and retry, as etcd's own client does.
_STALE_TOKEN = ("invalid auth token", "revision of auth store is old")


def _stale_token(exc: grpc.aio.AioRpcError) -> bool:
    details = exc.details() or ""
    return any(s in details for s in _STALE_TOKEN)


def _translate(exc: grpc.aio.AioRpcError, what: str) -> MetadataError:
    if exc.code() in _UNAVAILABLE or _stale_token(exc):
        return MetadataUnavailableError(f"etcd unavailable ({exc.code().name}) at {what}")
    if exc.code() in _REFUSED:
        return MetadataRefusedError(f"etcd refused ({exc.details()}) at {what}")
    return MetadataError(f"etcd error {exc.code().name} at {what}: {exc.details()}")


class Connection:
    """Channels to one etcd (or cluster), the credentials and the token; every call goes
    through here."""

    def __init__(
        self,
        target: str,
        *,
        clock: Clock,
        credentials: EtcdCredentials = NO_CREDENTIALS,
    ) -> None:
        self.target = target
        self._clock = clock
        self._username, self._password = credentials.username, credentials.password
        self._credentials_source = credentials.source
        self._tls = (
            (credentials.ca, credentials.cert, credentials.key)
            if credentials.ca is not None
            else None
        )
        self._channel: Any = None
        self._lease_channel: Any = None
        # The generated stubs (``aetcd.rpc``), for the calls this module has no method for
        # (tests: compaction, a lease's TTL).
        self.kv: Any = None
        self.lease_stub: Any = None
        self._txn_raw: Any = None
        self._watch: Any = None
        self.token: Token = None
        self._reauthenticating: asyncio.Task[None] | None = None

    def open(self) -> None:
        """Make the channels (they connect when first used)."""
        self._channel = self._open_channel()
        self._lease_channel = self._open_channel()
        self.kv = rpc.KVStub(self._channel)
        # Txn taking the request already serialized (``batches.TxnBatcher`` builds a batch's
        # bytes from its members' own).
        self._txn_raw = self._channel.unary_unary(
            "/etcdserverpb.KV/Txn",
            request_serializer=None,
            response_deserializer=rpc.TxnResponse.FromString,
        )
        self.lease_stub = rpc.LeaseStub(self._lease_channel)
        self._watch = rpc.WatchStub(self._channel)

    def _open_channel(self) -> Any:
        # A separate subchannel each time (gRPC would otherwise share one connection).
        options = [
            ("grpc.use_local_subchannel_pool", 1),
            ("grpc.initial_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[0]),
            ("grpc.min_reconnect_backoff_ms", CONNECT_TIMEOUT_MS),
            ("grpc.max_reconnect_backoff_ms", RECONNECT_BACKOFF_MS[1]),
        ]
        if self._tls is not None:
            ca, cert, key = self._tls
            creds = grpc.ssl_channel_credentials(ca, key, cert)
            return grpc.aio.secure_channel(self.target, creds, options=options)
        return grpc.aio.insecure_channel(self.target, options=options)

    async def close(self) -> None:
        for channel in (self._channel, self._lease_channel):
            if channel is not None:
                await channel.close()

    # credentials --------------------------------------------------------------------------

    async def _reread_credentials(self) -> None:
        if self._credentials_source is None:
            return
        try:
            text = (await self._credentials_source() or "").strip()
        except Exception as exc:
            log.warning("etcd credentials unreadable, keeping the last ones: %s", exc)
            return
        user, sep, password = text.partition(":")
        if sep and user and password:
            self._username, self._password = user, password

    async def authenticate(self, *, again: bool = False) -> None:
        """Trade the credentials for a token; ``again``: after etcd refused the last token or
        lost the session (the credentials are read again from their source first)."""
        if again:
            await self._reread_credentials()
        if self._username is None:
            return
        auth = rpc.AuthStub(self._channel)
        try:
            resp = await auth.Authenticate(
                rpc.AuthenticateRequest(name=self._username, password=self._password or ""),
                timeout=CALL_TIMEOUT_S,
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() in _UNAVAILABLE:
                raise _translate(exc, "authenticate") from exc
            if again:
                # Worked before: a password being rotated (its file not updated yet).
                raise MetadataUnavailableError(
                    f"etcd refused user {self._username!r} on authenticating again "
                    f"({exc.details()}): waiting for its new credentials"
                ) from exc
            raise MetadataError(
                f"etcd refused user {self._username!r} ({exc.details()}): check the "
                "credentials (etcd://USER:PASSWORD@..., HEDWIG_ETCD_CREDENTIALS[_FILE])"
            ) from exc
        self.token = (("token", resp.token),)

    async def renew_token(self, stale: Token) -> None:
        """Authenticate again after etcd refused the token ``stale``: once, however many
        calls were refused with it (they all wait for the one new token)."""
        if self.token is not stale:
            return  # renewed meanwhile
        task = self._reauthenticating
        if task is None or task.done():
            log.warning(
                "etcd refused this client's token (etcd restarted, or the token expired): "
                "authenticating again"
            )
            task = self._reauthenticating = asyncio.get_running_loop().create_task(
                self.authenticate(again=True)
            )
        await asyncio.shield(task)

    # calls --------------------------------------------------------------------------------

    async def call(self, method: Any, request: Any, what: str) -> Any:
        """``method`` (a stub's) with ``request``; sent again once with a new token if etcd
        refused the one it went with."""
        token = self.token
        try:
            return await method(request, timeout=CALL_TIMEOUT_S, metadata=token)
        except grpc.aio.AioRpcError as exc:
            if not _stale_token(exc):
                raise _translate(exc, what) from exc
        await self.renew_token(token)
        try:
            return await method(request, timeout=CALL_TIMEOUT_S, metadata=self.token)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, what) from exc

    async def send_txn(self, request: bytes) -> Any:
        """One serialized ``TxnRequest``; its ``TxnResponse``."""
        return await self.call(self._txn_raw, request, "transaction")

    async def range(self, request: Any, what: str) -> Any:
        return await self.call(self.kv.Range, request, what)

    # leases (``lease_keeper.LeaseService``) ---------------------------------------------

    async def connect(self) -> None:
        """Wait for the lease channel's connection, ``CONNECT_TIMEOUT_MS`` at most."""
        try:
            await self._clock.wait_for(
                self._lease_channel.channel_ready(), CONNECT_TIMEOUT_MS / 1000
            )
        except TimeoutError:
            raise MetadataUnavailableError("etcd unreachable: no connection for leases") from None

    async def grant(self, ttl: int) -> int:
        resp = await self.call(self.lease_stub.LeaseGrant, rpc.LeaseGrantRequest(TTL=ttl), "lease")
        return int(resp.ID)

    async def revoke(self, lease: int) -> None:
        await self.call(self.lease_stub.LeaseRevoke, rpc.LeaseRevokeRequest(ID=lease), "revoke")

    async def keep_alive(self, leases: Sequence[int], deadline: float) -> int:
        """Refresh ``leases`` in one stream, answered by ``deadline`` (on the clock); the
        lowest TTL left (0: one of them is gone). A refresh refused for its token goes again
        with a new one at once, as any other call does (``call``): after an etcd restart the
        next try would have come a third of the TTL later, past the lease's end after an
        outage of two thirds of it."""

        async def each() -> AsyncIterator[Any]:
            for lease in leases:
                yield rpc.LeaseKeepAliveRequest(ID=lease)

        for attempt in range(2):
            timeout = deadline - self._clock.monotonic()
            if timeout <= 0:
                raise MetadataUnavailableError("etcd answered no lease refresh for a whole TTL")
            lowest: int | None = None
            answered = 0
            token = self.token
            try:
                stream = self.lease_stub.LeaseKeepAlive(each(), timeout=timeout, metadata=token)
                async for reply in stream:
                    ttl = int(reply.TTL)
                    lowest = ttl if lowest is None else min(lowest, ttl)
                    answered += 1
                    if answered == len(leases):
                        return lowest
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and _stale_token(exc):
                    await self.renew_token(token)
                    continue
                raise _translate(exc, "lease keep-alive") from exc
            break
        raise MetadataUnavailableError("etcd closed the lease keep-alive stream")

    # watches (``watch_stream``) ---------------------------------------------------------

    async def watch(self, requests: asyncio.Queue[Any]) -> AsyncIterator[Any]:
        """One watch stream: each request put on ``requests`` is sent, each response
        yielded. Ends with ``MetadataError`` when the stream breaks (a new token asked for
        first if etcd refused the one it went with), or with nothing if etcd ends it."""
        token = self.token
        call = self._watch.Watch(metadata=token)

        async def send() -> None:
            # Until the stream ends: a write to a stream that broke fails, and the reading
            # side below says why.
            with contextlib.suppress(grpc.aio.AioRpcError, grpc.aio.UsageError):
                while True:
                    await call.write(await requests.get())

        sender = asyncio.get_running_loop().create_task(send())
        try:
            while True:
                resp = await call.read()
                if resp is grpc.aio.EOF:
                    return
                yield resp
        except grpc.aio.AioRpcError as exc:
            log.info("etcd watch stream broke: %s", exc.code().name)
            if _stale_token(exc):
                with contextlib.suppress(MetadataError):
                    await self.renew_token(token)
            raise _translate(exc, "watch") from exc
        finally:
            sender.cancel()
            call.cancel()
