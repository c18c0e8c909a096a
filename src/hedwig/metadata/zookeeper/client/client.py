"""``ZkClient``: a ZooKeeper client on the event loop, with batching as its way of working.

Its parts, each a module of this package: the codec (``codes``, ``jute``, ``records``: pure),
a ``connection`` driving it over an asyncio transport, the ``session`` table and its
``keeper`` (connects, reconnects, pings, on the injected clock), the ``channel`` every request
goes through (admitted while connected, at most ``slots.MAX_IN_FLIGHT`` out), and the three
ways requests of one turn of the loop go together: ``reads`` (``multiRead``), ``writes``
(``multi``) and ``watches`` (``SetWatches``). The client has no thread of its own: answers,
notifications and session changes arrive on the loop, in the order the server sent them
(only an answer of megabytes is decoded on the loop's executor, ``connection``).

The operations are ZooKeeper's, with what Hedwig's store needs of them: versions (-1 for
any), ``makepath`` creating missing parents, one-shot watches, ZooKeeper's errors as the
exceptions of ``codes`` (a missing znode read is ``None``, not an error). While the session is
not connected, every request is refused at once with
``hedwig.errors.MetadataUnavailableError``, as one in flight when its connection drops is
(its outcome then unknown); nothing waits for the connection to come back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from hedwig.clock import Clock, SystemClock
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.zookeeper.client.channel import Channel
from hedwig.metadata.zookeeper.client.codes import NO_NODE, CreateFlag, NodeExists, NoNode, Perm
from hedwig.metadata.zookeeper.client.connection import Connection, Opener, open_tcp
from hedwig.metadata.zookeeper.client.keeper import SessionKeeper
from hedwig.metadata.zookeeper.client.reads import Read, Reads
from hedwig.metadata.zookeeper.client.records import (
    Acl,
    Create2Request,
    Create2Response,
    DeleteRequest,
    ExistsRequest,
    GetAclRequest,
    GetAclResponse,
    GetChildrenRequest,
    GetChildrenResponse,
    GetDataRequest,
    GetDataResponse,
    Id,
    SetAclRequest,
    SetDataRequest,
    Stat,
    StatResponse,
    WatcherEvent,
)
from hedwig.metadata.zookeeper.client.session import Phase
from hedwig.metadata.zookeeper.client.slots import MAX_IN_FLIGHT
from hedwig.metadata.zookeeper.client.watches import Kind, OneShot, Watcher, Watches
from hedwig.metadata.zookeeper.client.writes import Op, Writes

log = logging.getLogger(__name__)

T = TypeVar("T")

OPEN_ACL_UNSAFE = (Acl(int(Perm.ALL), Id("world", "anyone")),)


class ZkClient:
    """One ZooKeeper session at a time, on the event loop (see the module docstring).

    ``hosts``: ``HOST:PORT[,HOST:PORT...]``. ``session_timeout``: seconds asked of the server
    (it may negotiate another). ``auth``: credentials presented on every connection, e.g.
    ``[("digest", b"user:password")]``. ``default_acl``: the ACL of every znode created
    without one. ``session``: an existing session's id and password to take over (ZooKeeper's
    own tests expire a session so). ``clock``, ``rng`` and ``opener``: the seams for tests."""

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout: float,
        auth: Sequence[tuple[str, bytes]] = (),
        default_acl: Sequence[Acl] = OPEN_ACL_UNSAFE,
        session: tuple[int, bytes] | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
        opener: Opener = open_tcp,
        max_in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        self.hosts = hosts
        self.session_timeout = session_timeout
        self.clock = clock or SystemClock()
        self._acl = tuple(default_acl)
        self._keeper = SessionKeeper(
            hosts,
            timeout_s=session_timeout,
            clock=self.clock,
            rng=rng or random.Random(),
            opener=opener,
            hooks=self,
            auth=auth,
            resume=session,
        )
        self._channel = Channel(self._keeper, max_in_flight)
        self._reads = Reads(self._channel)
        self._writes = Writes(self._channel, self._acl)
        self._watches = Watches(self._channel, self._reads)
        self._listeners: list[Callable[[Phase], None]] = []
        self._connected = asyncio.Event()

    # session ------------------------------------------------------------------------------

    async def start(self, timeout: float = 15.0) -> None:
        """Connect; ``MetadataUnavailableError`` (and closed) if no server answers in time.
        Started again after that (or after ``close``), the client seeks a new session; while
        it is connected already, this returns at once."""
        if self.phase is Phase.CONNECTED:
            return
        self._connected.clear()
        self._watches.open()
        self._keeper.start()
        try:
            await self.clock.wait_for(self._connected.wait(), timeout)
        except TimeoutError as exc:
            await self.close()
            raise MetadataUnavailableError(f"cannot reach ZooKeeper at {self.hosts}") from exc

    async def close(self) -> None:
        """End the session (its ephemeral znodes go now) and stop; every watch is dropped."""
        self._watches.close()
        await self._keeper.close()

    @property
    def phase(self) -> Phase:
        return self._keeper.phase

    def add_listener(self, listener: Callable[[Phase], None]) -> None:
        """Called with every change of the session's phase (on the loop)."""
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        return self._keeper.credentials.session_id

    @property
    def session_password(self) -> bytes:
        return self._keeper.credentials.password

    @property
    def last_zxid(self) -> int:
        """The latest zxid this session has seen."""
        return self._keeper.last_zxid

    @property
    def requests(self) -> int:
        """Requests sent on the current connection (not pings): one per ``multi``,
        ``multiRead`` or ``SetWatches`` however many callers it serves."""
        connection = self._keeper.connection
        return 0 if connection is None else connection.requests

    @property
    def connection(self) -> Connection | None:
        """The connection in use, while connected."""
        return self._keeper.connection

    @property
    def in_flight(self) -> int:
        """Requests holding a slot (``slots.MAX_IN_FLIGHT``)."""
        return self._channel.slots.used

    @property
    def watches(self) -> Watches:
        return self._watches

    @property
    def reads_together(self) -> bool:
        """Whether the server reads many znodes in one request (ZooKeeper 3.6+)."""
        return self._reads.together

    # KeeperHooks (called by the keeper, on the loop)

    def changed(self, old: Phase, new: Phase) -> None:
        self._channel.slots.wake_all()  # waiters look at the connection again
        if new is Phase.CONNECTED:
            self._connected.set()
            self._watches.connected()
        if new is Phase.EXPIRED:
            self._watches.expired()
        for listener in list(self._listeners):
            try:
                listener(new)
            except Exception:  # a broken listener must not stop the others
                log.exception("ZooKeeper session listener failed")

    def primed(self, connection: Connection) -> None:
        self._watches.primed(connection, self._keeper.credentials.last_zxid)

    def event(self, event: WatcherEvent) -> None:
        self._watches.event(event)

    # requests -----------------------------------------------------------------------------

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
        acl: Sequence[Acl] | None = None,
    ) -> tuple[str, Stat]:
        """The created znode's path (with its sequence number, if ``sequence``) and stat;
        ``makepath``: its missing parents created first (empty, with the same ACL)."""
        flags = (CreateFlag.EPHEMERAL if ephemeral else 0) | (
            CreateFlag.SEQUENTIAL if sequence else 0
        )
        request = Create2Request(path, value, tuple(acl or self._acl), int(flags))
        try:
            made: Create2Response = await self._channel.call(request, path)
        except NoNode:
            if not makepath or path.rpartition("/")[0] in ("", "/"):
                raise
            await self._make_parents(path, acl)
            made = await self._channel.call(request, path)
        return made.path, made.stat

    async def _make_parents(self, path: str, acl: Sequence[Acl] | None) -> None:
        parent = path.rpartition("/")[0]
        with contextlib.suppress(NodeExists):
            await self.create(parent, b"", makepath=True, acl=acl)

    async def get(self, path: str) -> tuple[bytes, Stat]:
        got: GetDataResponse = await self._channel.call(GetDataRequest(path, False), path)
        return got.data, got.stat

    def get_or_none(self, path: str) -> asyncio.Future[Read]:
        """``path``'s data and stat, ``None`` if it does not exist; reads made in one turn of
        the loop go to ZooKeeper together (``reads``)."""
        return self._reads.get_or_none(path)

    async def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        got: StatResponse = await self._channel.call(
            SetDataRequest(path, value, version), path, version
        )
        return got.stat

    async def delete(self, path: str, version: int = -1) -> None:
        await self._channel.call(DeleteRequest(path, version), path, version)

    async def delete_recursive(self, path: str) -> None:
        """``path`` and everything under it; nothing if it is gone."""
        try:
            children = await self.children(path)
        except NoNode:
            return
        await asyncio.gather(*(self.delete_recursive(f"{path}/{c}") for c in children))
        with contextlib.suppress(NoNode):
            await self.delete(path)

    async def exists(self, path: str) -> Stat | None:
        got: StatResponse | None = await self._channel.call(
            ExistsRequest(path, False), path, missing=True
        )
        return None if got is None else got.stat

    async def children(self, path: str) -> list[str]:
        got: GetChildrenResponse = await self._channel.call(GetChildrenRequest(path, False), path)
        return list(got.children)

    async def ensure_path(self, path: str) -> None:
        """``path`` and its parents, created if missing. Looked at first: on a protected
        tree a client without the digest may read a znode but not create it, and ZooKeeper
        checks the permission before the znode's existence."""
        if await self.exists(path) is not None:
            return
        with contextlib.suppress(NodeExists):
            await self.create(path, b"", makepath=True)

    async def get_acls(self, path: str) -> tuple[list[Acl], Stat]:
        got: GetAclResponse = await self._channel.call(GetAclRequest(path), path)
        return list(got.acl), got.stat

    async def set_acls(self, path: str, acl: Sequence[Acl], version: int = -1) -> Stat:
        got: StatResponse = await self._channel.call(
            SetAclRequest(path, tuple(acl), version), path, version
        )
        return got.stat

    async def transaction(self, ops: Sequence[Op]) -> list[MetadataError | None]:
        """``ops`` all take effect or none does (``multi``); transactions made in one turn
        go together (``writes``). The outcome of each operation; unavailability raises."""
        return await self._writes.transaction(ops)

    # watches ------------------------------------------------------------------------------

    def one_shot(self, callback: Callable[[], None]) -> Watcher:
        """A watcher running ``callback`` once, however many of the watches it is given to
        fire (one for a listing and each of its entries, say)."""
        return OneShot(callback)

    def watch(self, path: str, callback: Callable[[], None], version: int | None = None) -> None:
        """One-shot: ``callback`` runs on the loop when ``path`` changes or goes, at once if
        it is gone already or no longer at ``version`` (the one the caller read or wrote)."""
        self._watches.set(path, OneShot(callback), version)

    def watch_with(
        self,
        path: str,
        callback: Callable[[T], None],
        arg: T,
        version: int | None = None,
        *,
        key: str | None = None,
    ) -> None:
        """``watch``, calling ``callback(arg)``: one callback for many paths, each watch one
        small object. ``key``: the end of a path of the kind given to ``file_watches_by_end``,
        a string the caller keeps anyway; the record files the watch by it."""
        self._watches.set(path, OneShot(callback, arg, key), version)

    def file_watches_by_end(self, prefix: str, suffix: str) -> None:
        self._watches.record.file_by_end(prefix, suffix)

    async def children_watched(self, path: str, watcher: Watcher) -> list[str]:
        """The children of ``path``; ``watcher`` fires when they change (or ``path`` goes)."""
        got: GetChildrenResponse = await self._channel.call(
            GetChildrenRequest(path, True), path, then=self._recording(path, watcher, Kind.CHILD)
        )
        return list(got.children)

    async def exists_watched(self, path: str, watcher: Watcher) -> Stat | None:
        """Whether ``path`` exists; ``watcher`` fires when it is created, changed or goes."""
        got: StatResponse | None = await self._channel.call(
            ExistsRequest(path, True),
            path,
            missing=True,
            then=self._recording(path, watcher, Kind.DATA, Kind.EXIST),
        )
        return None if got is None else got.stat

    async def get_watched(self, path: str, watcher: Watcher) -> tuple[bytes, Stat] | None:
        """``path``'s data (``None`` if gone: no watch set then); ``watcher`` fires when it
        changes or goes."""
        got: GetDataResponse | None = await self._channel.call(
            GetDataRequest(path, True),
            path,
            missing=True,
            then=self._recording(path, watcher, Kind.DATA),
        )
        return None if got is None else (got.data, got.stat)

    def _recording(
        self, path: str, watcher: Watcher, found: Kind, missing: Kind | None = None
    ) -> Callable[[int], None]:
        """What records a watch set by a read, as its answer arrives: ``found`` if the znode
        was there, ``missing`` if the server said it was not (an exists watch)."""
        record = self._watches.record

        def recorded(err: int) -> None:
            if err == 0:
                record.add(found, path, watcher)
            elif err == NO_NODE and missing is not None:
                record.add(missing, path, watcher)

        return recorded
