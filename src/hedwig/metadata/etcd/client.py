"""The one module that talks to etcd (its v3 gRPC API), and the hub's lease on it.

The client library: ``aetcd`` from PyPI, which works with Python 3.11 and etcd 3.6 (checked by
the conformance suite against a real etcd) and ships etcd's protocol definitions compiled for
``grpc.aio``. We use those generated stubs (``aetcd.rpc``) over a channel of our own rather than
its ``Client``, which opens plaintext channels only (no TLS: security is on by default here) and
cannot page a range (listing a million topics must not be one response). Everything else
(compare-and-set transactions, leases, watches) is a handful of RPCs, wrapped here; gRPC errors
become ``MetadataUnavailableError`` (retry later) or ``MetadataError`` at this boundary.
Transactions, which nearly every operation is, are written as bytes by ``wire`` rather than
built as the stubs' messages (three times the CPU, on hubs short of it in a failover); their
answers are the stubs' messages.

**The lease is the session.** ZooKeeper ties ephemeral records to a session; etcd ties keys to a
lease, which lives as long as its holder refreshes it within its TTL. The client grants one
lease at start (TTL: the session timeout), refreshes it every third of the TTL, and reports:
``CONNECTED`` while refreshes succeed, ``SUSPENDED`` when one fails, ``LOST`` when the lease is
gone (etcd says so, or no refresh was answered for a whole TTL by this process's clock, the last
one failed or still unanswered: etcd expires it by then), and ``CONNECTED`` again with a new
lease (a new session: owner records must be claimed afresh).

**Credentials are kept, tokens renewed.** With etcd's authentication on, the client trades
``USER:PASSWORD`` for a token once and sends the token with every call. etcd forgets its
tokens when it restarts (and a JWT token expires, and a token from before a change of users or
roles is refused as old): a call refused for its token makes the client authenticate again,
once for every caller waiting, and the call is sent again. A wrong password or a missing
permission is a ``MetadataError`` at once, never retried. Credentials with a source
(``credentials_source``: a mounted Secret's file, the operator's Secret through the API) are
read again at each authentication, so a rotated
password is picked up when etcd refuses the old token (changing a user's password makes etcd
refuse the tokens issued before); a refusal then is retriable (the file may not show the new
password yet), not the hard error it is at start.

**Owner records go on leases of their own**, up to ``OWNER_LEASES`` of them per session, a
record's by a hash of its key, granted when first needed and refreshed with the session's
lease in one stream. A lease that expires takes its keys in one raft entry, and etcd applies
nothing else meanwhile: in a million-topic region a hub lost its lease with 334,426 owner
records on it and etcd stood still for 11.8 s (a loaded etcd of 3.5 GB), every other hub's
requests and lease refreshes waiting. On a quiet etcd (``bench/lease_expiry.py``, 300,000
records) one lease's expiry held every write up for 1.5-1.7 s, 32 leases' for 0.8-0.9 s at
the longest: etcd revokes the leases that expired together one after the other, so the
region's writes wait as long in all, but in shorter pieces. The session is one: if any of
its leases is gone, the session is ``LOST`` and the others are revoked first.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import math
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NamedTuple

import grpc  # type: ignore[import-untyped]
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.etcd import wire
from hedwig.metadata.etcd.batches import TxnBatcher
from hedwig.metadata.etcd.wire import Op, get
from hedwig.metadata.managers import SessionState

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
# Keys per range request when listing (etcd answers in one message: keep it far below 4 MB).
PAGE = 10_000
# Leases a session spreads its owner records over (see the module's docstring).
OWNER_LEASES = 32

_UNAVAILABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
}


class Item(NamedTuple):
    """One key as etcd holds it: ``mod`` (its mod revision) is what compare-and-set checks.

    A named tuple rather than a frozen dataclass: made for every key a transaction reads,
    thousands a second in a failover, and a frozen dataclass's construction cost five times
    a tuple's."""

    key: bytes
    value: bytes
    mod: int
    create: int
    lease: int


def _item(kv: Any) -> Item:
    # protobuf's (upb's) fields are ``bytes`` and ``int`` already.
    return Item(kv.key, kv.value, kv.mod_revision, kv.create_revision, kv.lease)


def _translate(exc: grpc.aio.AioRpcError, what: str) -> MetadataError:
    if exc.code() in _UNAVAILABLE or _stale_token(exc):
        return MetadataUnavailableError(f"etcd unavailable ({exc.code().name}) at {what}")
    return MetadataError(f"etcd error {exc.code().name} at {what}: {exc.details()}")


# etcd's answers to a token it no longer accepts (``rpctypes.ErrGRPCInvalidAuthToken``,
# ``ErrGRPCAuthOldRevision``): authenticate again and retry, as etcd's own client does.
# Where ``USER:PASSWORD`` is read from at each authentication (None: keep the last ones).
CredentialsSource = Callable[[], Awaitable[str | None]]

_STALE_TOKEN = ("invalid auth token", "revision of auth store is old")


def _stale_token(exc: grpc.aio.AioRpcError) -> bool:
    details = exc.details() or ""
    return any(s in details for s in _STALE_TOKEN)


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range holding every key that starts with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


# Transaction parts (``wire``) ------------------------------------------------------------


def delete(key: bytes, *, prefix: bool = False) -> Op:
    """A delete of ``key``, or with ``prefix`` of every key that starts with it."""
    return wire.delete(key, prefix_end(key) if prefix else b"")


class TxnResult(NamedTuple):
    """A transaction's outcome (a named tuple, as ``Item``)."""

    succeeded: bool
    revision: int
    # The keys read by ``get`` operations of the branch that ran, in order (None: absent).
    reads: tuple[Item | None, ...]


class EtcdClient:
    """One channel to etcd, and this process's lease on it."""

    def __init__(
        self,
        target: str,
        *,
        ttl_s: float,
        username: str | None = None,
        password: str | None = None,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
        credentials_source: CredentialsSource | None = None,
    ) -> None:
        self.target = target
        self.ttl = max(2, math.ceil(ttl_s))
        self._username, self._password = username, password
        self._credentials_source = credentials_source
        self._tls = (ca, cert, key) if ca is not None else None
        self._channel: grpc.aio.Channel | None = None
        self._lease_channel: grpc.aio.Channel | None = None
        self._kv: Any = None
        self._txn_raw: Any = None
        self._leases: Any = None
        self._watch: Any = None
        self._metadata: tuple[tuple[str, str], ...] | None = None
        self._reauthenticating: asyncio.Task[None] | None = None
        self.lease = 0
        # When the newest grant or refresh etcd answered was sent (``_keep_alive``).
        self._renewed_at = 0.0
        # Owner records' leases by slot, and their grants under way (``owner_lease``).
        self._owner_leases: dict[int, int] = {}
        self._granting: dict[int, asyncio.Task[int]] = {}
        self.state = SessionState.SUSPENDED
        self._listeners: list[Callable[[SessionState], None]] = []
        self._keeper: asyncio.Task[None] | None = None
        self._watcher: _Watcher | None = None
        # Every single-key read and transaction goes through it (``batches``).
        self.batcher = TxnBatcher(self._send_txn)

    # connection and session ---------------------------------------------------------------

    async def start(self, timeout: float = 15.0) -> None:
        self._channel = self._open_channel()
        # The lease's refreshes get a connection of their own: queued behind thousands of
        # writes (a burst of claims) they could arrive after the TTL, and every owner record
        # of the hub would go with the lease.
        self._lease_channel = self._open_channel()
        self._kv = rpc.KVStub(self._channel)
        # Txn taking the request already serialized (``batches.TxnBatcher`` builds a batch's
        # bytes from its members' own).
        self._txn_raw = self._channel.unary_unary(
            "/etcdserverpb.KV/Txn",
            request_serializer=None,
            response_deserializer=rpc.TxnResponse.FromString,
        )
        self._leases = rpc.LeaseStub(self._lease_channel)
        self._watch = rpc.WatchStub(self._channel)
        deadline = time.monotonic() + timeout
        while True:
            try:
                await self._authenticate()
                await self._grant()
                break
            except MetadataUnavailableError:
                if time.monotonic() > deadline:
                    await self._close_channels()
                    raise
                await asyncio.sleep(0.2)
            except MetadataError:
                await self._close_channels()  # refused (credentials): trying again won't help
                raise
        self._set_state(SessionState.CONNECTED)
        self._watcher = _Watcher(self)
        self._keeper = asyncio.get_running_loop().create_task(self._keep_alive())

    def _open_channel(self) -> Any:
        # A separate subchannel each time (gRPC would otherwise share one connection).
        # gRPC waits longer and longer between attempts to reconnect, up to two minutes by
        # default: after an etcd outage of a minute or so every hub would stay cut off for
        # another one, its session lost meanwhile. Two seconds at most, as a session is many.
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

    async def _authenticate(self, *, again: bool = False) -> None:
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
        self._metadata = (("token", resp.token),)

    async def _renew_token(self, stale: tuple[tuple[str, str], ...] | None) -> None:
        """Authenticate again after etcd refused the token ``stale``: once, however many
        calls were refused with it (they all wait for the one new token)."""
        if self._metadata is not stale:
            return  # renewed meanwhile
        task = self._reauthenticating
        if task is None or task.done():
            log.warning(
                "etcd refused this client's token (etcd restarted, or the token expired): "
                "authenticating again"
            )
            task = self._reauthenticating = asyncio.get_running_loop().create_task(
                self._authenticate(again=True)
            )
        await asyncio.shield(task)

    async def _grant(self) -> None:
        # The session counts from the grant's sending (``_keep_alive``), so not from the
        # making of the connection before it: on a link a second slow each way that took
        # another second or two, and the session was lost at its first refresh.
        assert self._lease_channel is not None  # started
        try:
            await asyncio.wait_for(self._lease_channel.channel_ready(), CONNECT_TIMEOUT_MS / 1000)
        except TimeoutError:
            raise MetadataUnavailableError("etcd unreachable: no connection for leases") from None
        asked = time.monotonic()
        self.lease = await self.grant()
        self._renewed_at = asked

    async def grant(self) -> int:
        """A new lease with the session's TTL (refreshed only if the session owns it)."""
        resp = await self.call(
            self._leases.LeaseGrant, rpc.LeaseGrantRequest(TTL=self.ttl), "lease"
        )
        return int(resp.ID)

    @property
    def leases(self) -> list[int]:
        """Every lease of the session: its own, then its owner records'."""
        return [self.lease, *self._owner_leases.values()]

    async def owner_lease(self, key: bytes) -> int:
        """The lease the owner record ``key`` goes on: one of ``OWNER_LEASES``, by a hash of
        the key, granted the first time it is needed in this session."""
        slot = zlib.crc32(key) % OWNER_LEASES
        lease = self._owner_leases.get(slot)
        if lease is not None:
            return lease
        task = self._granting.get(slot)
        if task is None:
            task = self._granting[slot] = asyncio.get_running_loop().create_task(
                self._grant_owner_lease(slot, self.lease)
            )
        return await asyncio.shield(task)

    async def _grant_owner_lease(self, slot: int, session: int) -> int:
        try:
            lease = await self.grant()
        finally:
            self._granting.pop(slot, None)
        if session != self.lease or self.state is SessionState.LOST:
            # The session was lost meanwhile: a record put on this lease would outlive it.
            await self._revoke([lease])
            raise MetadataUnavailableError("the etcd session was lost while granting a lease")
        self._owner_leases[slot] = lease
        return lease

    async def _revoke(self, leases: Sequence[int]) -> None:
        """Revoke ``leases`` (their keys go now), as far as etcd can be reached: all asked at
        once (etcd applies them one after the other; a stop need not wait 33 round trips)."""

        async def one(lease: int) -> None:
            with contextlib.suppress(MetadataError):
                await self.call(
                    self._leases.LeaseRevoke, rpc.LeaseRevokeRequest(ID=lease), "revoke"
                )

        await asyncio.gather(*(one(lease) for lease in leases))

    def _forget_owner_leases(self) -> list[int]:
        leases = list(self._owner_leases.values())
        self._owner_leases.clear()
        return leases

    async def close(self) -> None:
        await self._stop_tasks()
        if self.lease and self.state is not SessionState.LOST:
            # Like closing a ZooKeeper session: our ephemeral records go now, not after a TTL.
            await self._revoke([*self._forget_owner_leases(), self.lease])
        await self._close_channels()

    async def drop(self) -> None:
        """Stop refreshing the session's leases and close, revoking nothing: what ``kill -9``
        of the process leaves etcd (benchmarks, tests)."""
        await self._stop_tasks()
        await self._close_channels()

    async def _stop_tasks(self) -> None:
        if self._keeper is not None:
            self._keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._keeper
            self._keeper = None
        if self._watcher is not None:
            await self._watcher.close()
            self._watcher = None
        await self.batcher.close()

    async def _close_channels(self) -> None:
        for channel in (self._channel, self._lease_channel):
            if channel is not None:
                await channel.close()

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    def _set_state(self, state: SessionState) -> None:
        if state is self.state:
            return
        log.info("etcd session %s -> %s (lease %x)", self.state.value, state.value, self.lease)
        self.state = state
        for listener in list(self._listeners):
            listener(state)

    async def _keep_alive(self) -> None:
        # The session is counted over a TTL after the newest grant or refresh etcd answered
        # was *sent*: etcd renewed the leases on receiving it, no earlier, so they last at
        # least until then. Counted from the answer (as etcd's own client counts), a link that
        # delays each packet by d would keep this hub serving for up to d after etcd let its
        # leases go and another hub could claim its topics (ledger fencing keeps it from
        # acknowledging anything then, but its clients would wait on it).
        # Refreshed a third of a TTL after the newest renewal was sent (at once, if a slow
        # link took that long to answer it: the grant of a new session included); ``pause``
        # instead after a failure.
        pause: float | None = None
        while True:
            wait = self._renewed_at + self.ttl / 3 - time.monotonic() if pause is None else pause
            await asyncio.sleep(max(0.0, wait))
            pause = None
            try:
                if self.state is SessionState.LOST:
                    # Owner leases left from the lost session (etcd may not have expired them
                    # all): their records must go, not wait for their TTL.
                    await self._revoke(self._forget_owner_leases())
                    await self._authenticate(again=True)
                    await self._grant()
                    self._set_state(SessionState.CONNECTED)
                    continue
                asked = time.monotonic()
                # No longer than the lease may last: a refresh that etcd never answers (a
                # partition that drops its packets, a frozen etcd) held the session CONNECTED
                # for the call's whole timeout, long after etcd had expired the lease. The hub
                # went on serving topics whose owner records were gone, and the other hubs,
                # which still saw it alive for a moment, sent their clients to it: nobody
                # claimed those topics while the partition lasted.
                ttl = await self._refresh(min(asked + CALL_TIMEOUT_S, self._renewed_at + self.ttl))
            except MetadataError as exc:
                left = self._renewed_at + self.ttl - time.monotonic()
                if left <= 0:
                    self._set_state(SessionState.LOST)
                    pause = self.ttl / 3
                    continue
                if self.state is SessionState.CONNECTED:
                    log.warning("etcd lease refresh failed: %s", exc)
                    self._set_state(SessionState.SUSPENDED)
                # Tried again sooner the nearer the lease's end (LOST there, if none answers).
                pause = min(self.ttl / 3, left / 2)
                continue
            took = time.monotonic() - asked
            if took > self.ttl / 3:
                # Past the next refresh's time: etcd (or this process) is slow enough that the
                # session is at risk; worth knowing which, when one is lost.
                log.warning("etcd lease refresh took %.1f s (TTL %d s)", took, self.ttl)
            if ttl <= 0:
                # One of the session's leases expired (or was revoked): its keys are gone, and
                # the session with it. The others' records go now too, before anyone hears
                # that the session is lost (as a ZooKeeper session's ephemerals go together).
                await self._revoke([*self._forget_owner_leases(), self.lease])
                self._set_state(SessionState.LOST)
                pause = self.ttl / 3
            else:
                self._renewed_at = asked
                self._set_state(SessionState.CONNECTED)

    async def _refresh(self, deadline: float) -> int:
        """Refresh every lease of the session in one stream, answered by ``deadline`` (on the
        monotonic clock); the lowest TTL left (0: one of them is gone, and with it the
        session). A refresh refused for its token goes again with a new one at once, as any
        other call does (``call``): after an etcd restart the next try would have come a
        third of the TTL later, past the lease's end after an outage of two thirds of it."""
        leases = self.leases

        async def each() -> AsyncIterator[Any]:
            for lease in leases:
                yield rpc.LeaseKeepAliveRequest(ID=lease)

        for attempt in range(2):
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                raise MetadataUnavailableError("etcd answered no lease refresh for a whole TTL")
            lowest: int | None = None
            answered = 0
            metadata = self._metadata
            try:
                stream = self._leases.LeaseKeepAlive(each(), timeout=timeout, metadata=metadata)
                async for reply in stream:
                    ttl = int(reply.TTL)
                    lowest = ttl if lowest is None else min(lowest, ttl)
                    answered += 1
                    if answered == len(leases):
                        return lowest
            except grpc.aio.AioRpcError as exc:
                if attempt == 0 and _stale_token(exc):
                    await self._renew_token(metadata)
                    continue
                raise _translate(exc, "lease keep-alive") from exc
            break
        raise MetadataUnavailableError("etcd closed the lease keep-alive stream")

    async def revoke_elsewhere(self, lease: int) -> None:
        """Revoke ``lease`` (tests: another process's session expires at once)."""
        await self.call(self._leases.LeaseRevoke, rpc.LeaseRevokeRequest(ID=lease), "revoke")

    # key-value ----------------------------------------------------------------------------

    async def call(self, method: Any, request: Any, what: str) -> Any:
        metadata = self._metadata
        try:
            return await method(request, timeout=CALL_TIMEOUT_S, metadata=metadata)
        except grpc.aio.AioRpcError as exc:
            if not _stale_token(exc):
                raise _translate(exc, what) from exc
        await self._renew_token(metadata)
        try:
            return await method(request, timeout=CALL_TIMEOUT_S, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise _translate(exc, what) from exc

    async def _send_txn(self, request: bytes) -> Any:
        return await self.call(self._txn_raw, request, "transaction")

    async def get(self, key: bytes) -> Item | None:
        return (await self.txn((), (get(key),))).reads[0]

    async def range(self, prefix: bytes, *, keys_only: bool = False) -> tuple[list[Item], int]:
        """Every key under ``prefix``, page by page, and the revision of the first page."""
        end = prefix_end(prefix)
        start = prefix
        out: list[Item] = []
        revision = 0
        while True:
            req = rpc.RangeRequest(
                key=start, range_end=end, limit=PAGE, keys_only=keys_only, revision=revision
            )
            resp = await self.call(self._kv.Range, req, prefix.decode())
            revision = revision or int(resp.header.revision)
            out.extend(_item(kv) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = bytes(resp.kvs[-1].key) + b"\0"

    async def txn(
        self, compare: Sequence[bytes], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """One transaction (its parts from ``wire``): ``compare`` all true runs ``success``,
        else ``failure``; the keys the branch that ran read, in order."""
        resp, revision = await self.batcher.submit(wire.txn(compare, success, failure))
        succeeded = bool(resp.succeeded)
        reads: list[Item | None] = []
        responses = None
        # Only the reads' answers are looked at (each field read from protobuf's message
        # makes an object): the branch that ran says which they are.
        for i, op in enumerate(success if succeeded else failure):
            if op.reads:
                if responses is None:
                    responses = resp.responses
                kvs = responses[i].response_range.kvs
                reads.append(_item(kvs[0]) if kvs else None)
        return TxnResult(succeeded, revision, tuple(reads))

    # watches ------------------------------------------------------------------------------

    async def watch_once(
        self, key: bytes, after: int, callback: Callable[[], None], *, prefix: bool = False
    ) -> None:
        """Call ``callback`` once, on the loop, at the first change of ``key`` (or of any key
        under it, with ``prefix``) after revision ``after``."""
        self.watch_from(key, after, callback, prefix=prefix)

    def watch_from(
        self, key: bytes, after: int, callback: Callable[[], None], *, prefix: bool = False
    ) -> None:
        """``watch_once`` without waiting: the watch is queued on the stream."""
        assert self._watcher is not None, "start the client first"
        self._watcher.add(key, prefix_end(key) if prefix else b"", after + 1, callback)


class _Watcher:
    """Every watch of the client on one gRPC watch stream (etcd multiplexes them): a watch per
    owned topic costs a little memory on both sides and nothing per second."""

    def __init__(self, client: EtcdClient) -> None:
        self._client = client
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        self._pending: list[Callable[[], None]] = []  # creates awaiting their watch id
        self._callbacks: dict[int, Callable[[], None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    def add(self, key: bytes, end: bytes, start: int, callback: Callable[[], None]) -> None:
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        self._pending.append(callback)
        create = rpc.WatchCreateRequest(key=key, range_end=end, start_revision=start)
        self._requests.put_nowait(rpc.WatchRequest(create_request=create))

    async def _outgoing(self) -> AsyncIterator[Any]:
        while True:
            yield await self._requests.get()

    async def _run(self) -> None:
        backoff = 0.2
        while not self._closed:
            metadata = self._client._metadata
            try:
                stream = self._client._watch.Watch(self._outgoing(), metadata=metadata)
                async for resp in stream:
                    backoff = 0.2
                    self._on(resp)
            except grpc.aio.AioRpcError as exc:
                log.info("etcd watch stream broke: %s", exc.code().name)
                if _stale_token(exc):
                    with contextlib.suppress(MetadataError):
                        await self._client._renew_token(metadata)
            if self._closed:
                return
            # Watches do not survive the stream: fire them all, so every watcher reads again
            # (an owner re-checks its record, an ACL reader re-reads the list).
            fired = list(self._callbacks.values()) + self._pending
            self._callbacks.clear()
            self._pending.clear()
            for cb in fired:
                cb()
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 2.0)

    def _on(self, resp: Any) -> None:
        wid = int(resp.watch_id)
        if resp.created:
            if not self._pending:
                return
            self._callbacks[wid] = self._pending.pop(0)
            if not resp.events and not resp.canceled:
                return
        if resp.events or resp.canceled or resp.compact_revision:
            cb = self._callbacks.pop(wid, None)
            if cb is not None:
                cb()
                cancel = rpc.WatchCancelRequest(watch_id=wid)
                self._requests.put_nowait(rpc.WatchRequest(cancel_request=cancel))

    async def close(self) -> None:
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


_Watch = tuple[int, Callable[[], None]]
_Watches = Callable[[], None] | list[_Watch]
_NO_REVISION = 1 << 62  # past any revision etcd will reach
# Changes a prefix watch remembers it delivered lately (``PrefixWatch``), about 200 bytes each.
# A failover's take-overs deliver a few thousand changes a second to every survivor; a
# take-over watches its record well within a second of writing it.
RECENT_KEYS = 8_192


class PrefixWatch:
    """Watches of many keys under one prefix, served by one etcd watch of the prefix.

    A hub watches the owner record of every topic it owns. One etcd watch each cost a
    message on the watch stream per claim (a fifth of a claiming hub's event loop) and a
    watcher in etcd per topic, which etcd catches up 512 at a time when they start behind.
    One watch of the whole prefix delivers every hub's changes to every hub instead (batched
    in its responses; a change of a key nobody here watches costs a dictionary lookup).

    ``add(key, after, callback)``: ``callback`` runs once, at the first change of ``key``
    after revision ``after``. The stream delivers changes in revision order; once it has
    delivered one past ``after``, a change of ``key`` in between went by before the watch
    was added. The stream keeps the keys it delivered lately, each with its last revision
    (``RECENT_KEYS`` of them: the window), so such a watch fires at once if its key changed
    after ``after``, and is served by the stream from now on if it did not. Only a watch
    from before the window is set on its own (``fallback``). In a failover each survivor's
    stream delivers every take-over of the region, so its own claims' writes were nearly
    always passed by the time their answers came: each was a watch of its own, which etcd
    then had to catch up from its history. If the stream breaks, every callback runs (its
    holder reads again) and the next ``add`` starts a new stream.
    """

    def __init__(
        self,
        client: EtcdClient,
        prefix: bytes,
        fallback: Callable[[bytes, int, Callable[[], None]], None],
    ) -> None:
        self._client = client
        self._prefix = prefix
        self._fallback = fallback
        # By key: the callback of its one watch, or a list of (after, callback) when there
        # are several (a key is nearly always watched once: a list each was 64 bytes per
        # owned topic).
        self._callbacks: dict[bytes, _Watches] = {}
        # The revision a key's one watch is from, while the stream has not delivered past
        # it (a change at or before it is not the one waited for); dropped once it has,
        # every later change being past it (a tuple and an int kept for good were about 90
        # bytes per owned topic). ``_after_floor``: the least of them.
        self._after: dict[bytes, int] = {}
        self._after_floor = _NO_REVISION
        self._delivered = -1  # no stream: the next add starts one
        # The keys delivered lately (their ends), each with its last revision, and the
        # changes in the order delivered (which says what leaves first): every change after
        # ``_recent_floor`` up to ``_delivered`` is here.
        self._recent: dict[bytes, int] = {}
        self._recent_order: collections.deque[tuple[bytes, int]] = collections.deque()
        self._recent_floor = _NO_REVISION
        self._task: asyncio.Task[None] | None = None
        self._requests: asyncio.Queue[Any] = asyncio.Queue()
        # For tests and benchmarks: watches set on their own.
        self.fallbacks = 0

    def follows(self, after: int) -> bool:
        """Whether a watch from revision ``after`` can be served by the running stream
        without being set on its own: the stream has not delivered past it, or what it
        delivered since is still in its window (whose floor is never past what it
        delivered)."""
        return self._task is not None and not self._task.done() and after >= self._recent_floor

    def add(self, key: bytes, after: int, callback: Callable[[], None]) -> None:
        # By the key's end past the prefix, which every key here shares (about 25 bytes
        # less per owned topic).
        whole, key = key, key[len(self._prefix) :]
        if self._task is None or self._task.done():
            self._delivered = self._recent_floor = after
            self._recent, self._recent_order = {}, collections.deque()
            self._task = asyncio.get_running_loop().create_task(self._run(after + 1))
        elif after < self._delivered:
            if after < self._recent_floor:
                self.fallbacks += 1
                self._fallback(whole, after, callback)
                return
            changed = self._recent.get(key, -1)
            if changed > after:  # went by before the watch: it fires now
                asyncio.get_running_loop().call_soon(callback)
                return
            after = self._delivered  # none since: every later change is still to come
        held = self._callbacks.get(key)
        if held is None:
            self._callbacks[key] = callback
            self._after[key] = after
            self._after_floor = min(self._after_floor, after)
        elif isinstance(held, list):
            held.append((after, callback))
        else:
            self._callbacks[key] = [(self._after.pop(key, -1), held), (after, callback)]

    async def _outgoing(self, start: int) -> AsyncIterator[Any]:
        create = rpc.WatchCreateRequest(
            key=self._prefix, range_end=prefix_end(self._prefix), start_revision=start
        )
        yield rpc.WatchRequest(create_request=create)
        while True:
            yield await self._requests.get()  # nothing more is sent: the stream stays open

    async def _run(self, start: int) -> None:
        metadata = self._client._metadata
        start_of_name = len(self._prefix)
        try:
            stream = self._client._watch.Watch(self._outgoing(start), metadata=metadata)
            async for resp in stream:
                if resp.canceled or resp.compact_revision:
                    break
                recent, order = self._recent, self._recent_order
                for ev in resp.events:
                    revision = int(ev.kv.mod_revision)
                    if revision > self._delivered:
                        self._delivered = revision
                    key = bytes(ev.kv.key)[start_of_name:]
                    recent[key] = revision
                    order.append((key, revision))
                    self._dispatch(key, revision)
                while len(order) > RECENT_KEYS:
                    key, revision = order.popleft()
                    self._recent_floor = revision
                    if recent.get(key) == revision:  # not changed again since
                        del recent[key]
                if self._delivered > self._after_floor:
                    self._passed()
        except grpc.aio.AioRpcError as exc:
            log.info("etcd prefix watch broke: %s", exc.code().name)
            if _stale_token(exc):
                with contextlib.suppress(MetadataError):
                    await self._client._renew_token(metadata)
        except asyncio.CancelledError:
            self._delivered = -1
            raise
        # Whatever happened meanwhile is unknown: everyone reads again.
        self._delivered = -1
        self._recent, self._recent_order = {}, collections.deque()
        self._recent_floor = _NO_REVISION
        fired, self._callbacks = self._callbacks, {}
        self._after, self._after_floor = {}, _NO_REVISION
        for held in fired.values():
            if isinstance(held, list):
                for _, callback in held:
                    callback()
            else:
                held()

    def _passed(self) -> None:
        """Forget the revisions of the watches the stream has delivered past."""
        delivered = self._delivered
        self._after = {k: a for k, a in self._after.items() if a >= delivered}
        self._after_floor = min(self._after.values(), default=_NO_REVISION)

    def _dispatch(self, key: bytes, revision: int) -> None:
        held = self._callbacks.get(key)
        if held is None:
            return
        if not isinstance(held, list):
            if revision <= self._after.get(key, -1):
                return
            del self._callbacks[key]
            self._after.pop(key, None)
            held()
            return
        due = [cb for after, cb in held if revision > after]
        if not due:
            return
        rest = [(after, cb) for after, cb in held if revision <= after]
        if rest:
            self._callbacks[key] = rest
        else:
            del self._callbacks[key]
        for callback in due:
            callback()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
