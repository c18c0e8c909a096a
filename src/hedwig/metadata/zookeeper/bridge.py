"""The one place where kazoo's threads meet the asyncio event loop.

kazoo runs its completion callbacks and watches on its own threads. Every callback here
crosses back to the loop (``_Crossing``), so the rest of Hedwig only ever sees coroutines and
event-loop callbacks. kazoo's exceptions are mapped to ours at this boundary and never travel
further.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple, TypeVar

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError as KzBadVersion,
)
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    OperationTimeoutError,
    RolledBackError,
    SessionExpiredError,
    UnimplementedError,
    ZookeeperError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Create2,
    Delete,
    Exists,
    GetChildren,
    GetData,
    SetData,
    Transaction,
)
from kazoo.protocol.states import ZnodeStat
from kazoo.security import (
    OPEN_ACL_UNSAFE,
    READ_ACL_UNSAFE,
    Permissions,
    make_acl,
    make_digest_acl,
)

from hedwig.errors import BadVersionError, MetadataError, MetadataUnavailableError
from hedwig.metadata.managers import SessionState
from hedwig.metadata.zookeeper.handler import PollingHandler
from hedwig.metadata.zookeeper.multiread import MAX_READS, GroupAnswer, MultiRead, PendingRead
from hedwig.metadata.zookeeper.multiwrite import OP_BYTES, PendingWrite, settle, together
from hedwig.metadata.zookeeper.setwatches import MAX_WATCHES, SetWatches
from hedwig.metadata.zookeeper.watchers import LeanKazooClient

log = logging.getLogger(__name__)

T = TypeVar("T")

# Requests in kazoo's hands (sent or not) at most, and watches waiting there unsent. kazoo
# wakes its connection thread with a byte on a socket pair for each request and that thread
# reads one per request it sends; the pair holds 278 such bytes, and the next request's
# ``send`` then blocks the thread that makes it (the event loop) until the connection thread
# catches up, which it does not while ZooKeeper is unreachable (the bytes of the requests
# the lost connection failed stay there too). A region of 100,000 topics whose ZooKeeper
# died had each hub's event loop stuck there for good: its owned topics, meant to go on on
# their open ledgers, stopped answering with it. So nothing is handed to kazoo while it is
# disconnected (a request is refused at once, as one in flight when the connection drops
# is; a watch waits here), and at most 192 + 64 otherwise, leaving room for the requests
# kazoo makes itself (the parents of a path it creates). (Requests now write a byte only to
# a waiting connection thread, ``hedwig.metadata.zookeeper.sending``, so the pair can no
# longer fill; the bounds stay, as what a hub may have waiting on ZooKeeper at once.)
MAX_IN_FLIGHT = 192
MAX_UNSENT_WATCHES = 64


class NodeExists(MetadataError):
    """The znode to create exists already (translated by the managers)."""


class NoNode(MetadataError):
    """The znode (or its parent) does not exist (translated by the managers)."""


class NotEmpty(MetadataError):
    """The znode to delete has children."""


def _translate(exc: BaseException, path: str, version: int) -> BaseException:
    if isinstance(exc, NodeExistsError):
        return NodeExists(path)
    if isinstance(exc, NoNodeError):
        return NoNode(path)
    if isinstance(exc, KzBadVersion):
        return BadVersionError.at(path, version)
    if isinstance(exc, NotEmptyError):
        return NotEmpty(path)
    if isinstance(
        exc,
        ConnectionLoss
        | SessionExpiredError
        | ConnectionClosedError
        | OperationTimeoutError
        | KazooTimeoutError,
    ):
        return MetadataUnavailableError(f"ZooKeeper unavailable ({type(exc).__name__}) at {path}")
    if isinstance(exc, ZookeeperError | KazooException):
        return MetadataError(f"ZooKeeper error {type(exc).__name__} at {path}: {exc}")
    return exc


def _digest_acl(digest: str | None) -> tuple[list[tuple[str, str]] | None, list[Any] | None]:
    """ZooKeeper digest authentication as ``USER:PASSWORD``, and the ACL every znode this
    client creates gets: everything for that user, reading for anyone (Kafka's
    ``zookeeper.set.acl``: another client can read the tree, not change or delete it)."""
    if not digest:
        return None, None
    user, sep, password = digest.partition(":")
    if not sep or not user or not password:
        raise MetadataError("ZooKeeper digest credentials are USER:PASSWORD")
    return [("digest", digest)], [make_digest_acl(user, password, all=True), *READ_ACL_UNSAFE]


_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.LOST,
}


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a ``ZkBridge.transaction``."""

    kind: Literal["check", "create", "delete", "set"]
    path: str
    version: int = -1  # check, delete, set: the znode version required (-1: any)
    value: bytes = b""  # create, set
    ephemeral: bool = False  # create: tied to this session


class _Crossing:
    """Callbacks from kazoo's threads run on the event loop in the order they were handed
    over, as ``call_soon_threadsafe`` would run them, but many to one wake-up of the loop.

    ``call_soon_threadsafe`` writes to the loop's wake-up socket each time: a system call
    on kazoo's thread, which then waits for the GIL the busy loop holds, for every answer
    and every watch. A hub taking topics over gets thousands a second; here one wake-up
    runs every callback handed over until the loop got to it. The queue is appended to
    before its length is looked at, and the loop empties it before it stops, so no
    callback waits for another to wake the loop."""

    __slots__ = ("_loop", "_queue")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._queue: collections.deque[tuple[Callable[..., None], tuple[Any, ...]]] = (
            collections.deque()
        )

    def call(self, callback: Callable[..., None], *args: Any) -> None:
        """From any thread: run ``callback(*args)`` on the loop soon."""
        queue = self._queue
        queue.append((callback, args))
        if len(queue) == 1:
            self._loop.call_soon_threadsafe(self._run)

    def _run(self) -> None:
        queue = self._queue
        while queue:
            callback, args = queue.popleft()
            try:
                callback(*args)
            except Exception as exc:  # as the loop does with a failed callback: log, go on
                self._loop.call_exception_handler(
                    {"message": "ZooKeeper callback failed", "exception": exc}
                )


class ZkBridge:
    """An asyncio face on one kazoo client (one ZooKeeper session at a time)."""

    def __init__(self, hosts: str, *, session_timeout: float, digest: str | None = None) -> None:
        self.hosts = hosts
        self.session_timeout = session_timeout
        auth_data, default_acl = _digest_acl(digest)
        # What a shared node above the regions gets: this user may do everything, anyone may
        # read it and create under it (each region its own, protected, subtree).
        self._shared_acl = (
            [default_acl[0], make_acl("world", "anyone", read=True, create=True)]
            if default_acl
            else None
        )
        self._client = LeanKazooClient(
            hosts=hosts,
            timeout=session_timeout,
            connection_retry={"max_tries": -1, "max_delay": 1},
            auth_data=auth_data,
            default_acl=default_acl,
            handler=PollingHandler(),
        )
        # What kazoo's methods give every request, worked out once: the client's chroot (as
        # kazoo normalises it) and the ACL of new nodes.
        self._root = (self._client.chroot or "").rstrip("/")
        self._acl = list(self._client.default_acl or OPEN_ACL_UNSAFE)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._crossing: _Crossing | None = None
        self._closed = False
        self._slots = _Slots(MAX_IN_FLIGHT)
        # Reads made this turn (``get_or_none``); whether ZooKeeper takes them together.
        self._reads: list[PendingRead] = []
        self._read_together = True
        # Transactions made this turn (``transaction``).
        self._writes: list[PendingWrite] = []
        self._tasks: set[asyncio.Task[None]] = set()
        # Watches to set once kazoo is connected and has room (``_set_watch``), in order.
        self._unset: collections.deque[tuple[str, Callable[[Any], None], int | None]] = (
            collections.deque()
        )
        self._flushing: asyncio.TimerHandle | None = None
        # Watches set this turn (``_register_watch``); whether ZooKeeper takes them together.
        self._watch_group: list[_Watch] = []
        self._watch_together = True
        self._listeners: list[Callable[[SessionState], None]] = []
        self.state = SessionState.SUSPENDED
        self._client.add_listener(self._on_state)

    # session ----------------------------------------------------------------------------

    async def start(self, timeout: float = 15.0) -> None:
        self._loop = asyncio.get_running_loop()
        self._to_loop()
        try:
            await self._loop.run_in_executor(None, lambda: self._client.start(timeout=timeout))
        except (KazooTimeoutError, KazooException) as exc:
            raise MetadataUnavailableError(f"cannot reach ZooKeeper at {self.hosts}") from exc
        self.state = SessionState.CONNECTED

    async def close(self) -> None:
        self._closed = True
        loop = asyncio.get_running_loop()

        def stop() -> None:
            try:
                self._client.stop()
                self._client.close()
            except KazooException:  # pragma: no cover - best effort on the way out
                log.debug("error closing ZooKeeper client", exc_info=True)

        await loop.run_in_executor(None, stop)

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    @property
    def session_id(self) -> int:
        sid = self._client.client_id
        return int(sid[0]) if sid else 0

    def _on_state(self, kz_state: str) -> None:
        state = _STATES.get(kz_state)
        if state is None or self._crossing is None:
            return
        self._crossing.call(self._deliver_state, state)

    def _deliver_state(self, state: SessionState) -> None:
        self.state = state
        self._slots.wake_all()  # those waiting for a slot look at the connection again
        if state is SessionState.CONNECTED:
            self._set_watches()
        for listener in list(self._listeners):
            try:
                listener(state)
            except Exception:  # a broken listener must not stop the others
                log.exception("metadata session listener failed")

    # operations -------------------------------------------------------------------------

    def _admitted_now(self, path: str) -> bool:
        """A slot for a request on ``path`` (``MAX_IN_FLIGHT``) taken at once, while
        connected; ``False`` if it must wait for one (``_admit``). Almost every request finds
        one free: profiled, awaiting a slot through two coroutines was 3.5 % of a take-over."""
        if not self._client.connected:
            raise MetadataUnavailableError(f"ZooKeeper unavailable (not connected) at {path}")
        return self._slots.take_now()

    async def _admit(self, path: str) -> None:
        """A slot for a request on ``path``, waited for, while connected."""
        await self._slots.take(self, path)
        if not self._client.connected:  # lost while waiting for a slot
            self._slots.give()
            raise MetadataUnavailableError(f"ZooKeeper unavailable (not connected) at {path}")

    async def _call(self, path: str, version: int, start: Callable[[], Any]) -> Any:
        """A request made by one of kazoo's ``*_async`` methods (``start``), for what
        ``_send`` does not make itself."""
        loop = self._loop or asyncio.get_running_loop()
        crossing = self._to_loop()
        if not self._admitted_now(path):
            await self._admit(path)
        fut: asyncio.Future[Any] = loop.create_future()
        slots = self._slots

        def done(result: Any) -> None:
            try:
                value = result.get()
            except BaseException as exc:
                err = _translate(exc, path, version)
                crossing.call(slots.answered, fut, None, err)
            else:
                crossing.call(slots.answered, fut, value, None)

        try:
            start().rawlink(done)
        except BaseException as exc:
            slots.give()
            raise _translate(exc, path, version) from exc
        return await fut

    async def _send(self, path: str, version: int, request: Any) -> Any:
        """``request`` (one of kazoo's protocol records, its path rooted: ``_rooted``) sent as
        it is, its answer or error back on the loop: what ``_call`` does for kazoo's
        ``*_async`` methods, without them. Each of those made an ``AsyncResult`` (a
        ``threading.Condition``) and normalised the path, and a ``create`` a second result and
        three wrapped functions: profiled, a sixth of a hub's time taking topics over."""
        loop = self._loop or asyncio.get_running_loop()
        crossing = self._to_loop()
        if not self._admitted_now(path):
            await self._admit(path)
        fut: asyncio.Future[Any] = loop.create_future()
        try:
            self._client._call(request, _Answer(crossing, self._slots, fut, path, version))
        except BaseException as exc:
            self._slots.give()
            raise _translate(exc, path, version) from exc
        return await fut

    def _rooted(self, path: str) -> str:
        """``path`` under the client's chroot, as kazoo's methods send it (paths here are
        absolute and normal already)."""
        return self._root + path if self._root else path

    async def create(
        self,
        path: str,
        value: bytes = b"",
        *,
        ephemeral: bool = False,
        sequence: bool = False,
        makepath: bool = False,
    ) -> tuple[str, ZnodeStat]:
        if not makepath:
            flags = (1 if ephemeral else 0) | (2 if sequence else 0)
            made, stat = await self._send(
                path, -1, Create2(self._rooted(path), value, self._acl, flags)
            )
            return str(made)[len(self._root) :], stat
        result = await self._call(
            path,
            -1,
            lambda: self._client.create_async(
                path,
                value,
                ephemeral=ephemeral,
                sequence=sequence,
                makepath=makepath,
                include_data=True,
            ),
        )
        return str(result[0]), result[1]

    async def get(self, path: str) -> tuple[bytes, ZnodeStat]:
        data, stat = await self._send(path, -1, GetData(self._rooted(path), None))
        return bytes(data or b""), stat

    async def get_or_none(self, path: str) -> tuple[bytes, ZnodeStat] | None:
        """``path``'s data, ``None`` if it does not exist. Reads made in one turn of the loop
        go to ZooKeeper together, once the turn ends (``hedwig.metadata.zookeeper.multiread``)."""
        if not self._read_together:
            try:
                return await self.get(path)
            except NoNode:
                return None
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[tuple[bytes, ZnodeStat] | None] = loop.create_future()
        reads = self._reads
        reads.append(PendingRead(path, fut))
        if len(reads) == 1:
            loop.call_soon(self._send_reads)
        elif len(reads) >= MAX_READS:
            self._send_reads()
        return await fut

    def _send_reads(self) -> None:
        """The reads gathered this turn, in one request (one slot of ``MAX_IN_FLIGHT``)."""
        reads, self._reads = self._reads, []
        if not reads:  # sent already: the turn filled a request
            return
        self._send_group(
            reads[0].path,
            functools.partial(self._queue_reads, reads),
            functools.partial(_fail_reads, reads),
        )

    def _send_group(
        self, path: str, send: Callable[[], None], fail: Callable[[BaseException], None]
    ) -> None:
        """``send`` a request made for many callers once a slot is taken for it (at once if
        one is free); ``fail`` them if none can be."""
        try:
            admitted = self._admitted_now(path)
        except MetadataError as exc:
            fail(exc)
            return
        if admitted:
            send()
        else:
            self._spawn(self._send_group_admitted(path, send, fail))

    async def _send_group_admitted(
        self, path: str, send: Callable[[], None], fail: Callable[[BaseException], None]
    ) -> None:
        try:
            await self._admit(path)
        except BaseException as exc:
            fail(exc)
            return
        send()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _queue_reads(self, reads: list[PendingRead]) -> None:
        """Hands ``reads`` to kazoo, a slot taken for them. (Reads gathered before ZooKeeper
        was found not to read together go together all the same: refused, they are read
        one by one, ``_reads_answered``.)"""
        request = MultiRead([self._rooted(r.path) for r in reads])
        answer = GroupAnswer(self._to_loop(), functools.partial(self._reads_answered, reads))
        try:
            self._client._call(request, answer)
        except BaseException as exc:
            self._slots.give()
            _fail_reads(reads, _translate(exc, reads[0].path, -1))

    def _read_alone(self, reads: list[PendingRead]) -> None:
        """Each of ``reads`` as a request of its own (a ZooKeeper without ``multiRead``)."""

        async def one(read: PendingRead) -> None:
            got: tuple[bytes, ZnodeStat] | None
            try:
                got = await self.get(read.path)
            except NoNode:
                got = None
            except BaseException as exc:
                _fail_reads([read], exc)
                return
            if not read.fut.done():
                read.fut.set_result(got)

        for read in reads:
            self._spawn(one(read))

    def _reads_answered(
        self, reads: list[PendingRead], results: list[Any] | None, exc: BaseException | None
    ) -> None:
        """On the loop: the answer to a ``MultiRead``, each read its own."""
        self._slots.give()
        if isinstance(exc, UnimplementedError):
            # A ZooKeeper older than 3.6: each read alone from now on.
            log.warning("ZooKeeper does not read many znodes at once (multiRead); one by one")
            self._read_together = False
            self._read_alone(reads)
            return
        if results is None or len(results) != len(reads):
            err = exc or MetadataError(f"ZooKeeper answered {len(reads)} reads with {results!r}")
            _fail_reads(reads, _translate(err, reads[0].path, -1))
            return
        for read, result in zip(reads, results, strict=True):
            if read.fut.done():
                continue
            if isinstance(result, NoNodeError):
                # Missing: an answer, not a failure (an exception would hold the reader's
                # frame in a cycle through its traceback and this future).
                read.fut.set_result(None)
            elif isinstance(result, BaseException):
                read.fut.set_exception(_translate(result, read.path, -1))
            else:
                read.fut.set_result(result)

    async def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        stat: ZnodeStat = await self._send(
            path, version, SetData(self._rooted(path), value, version)
        )
        return stat

    async def delete(self, path: str, version: int = -1) -> None:
        await self._send(path, version, Delete(self._rooted(path), version))

    async def delete_recursive(self, path: str) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, lambda: self._client.delete(path, recursive=True))
        except NoNodeError:
            return
        except BaseException as exc:
            raise _translate(exc, path, -1) from exc

    async def transaction(self, ops: Sequence[Op]) -> list[BaseException | None]:
        """``ops`` all take effect or none does (ZooKeeper's ``multi``). The outcome of
        each, in order: ``None`` if it took effect, else why not (``NoNode``, ``NodeExists``,
        ``BadVersionError``; ``MetadataError`` for one rolled back because another failed).
        Unavailability raises.

        Transactions made in one turn of the loop go to ZooKeeper together, once the turn
        ends, each still all or nothing on its own (``hedwig.metadata.zookeeper.multiwrite``).
        """
        requests: list[Any] = []
        size = 0
        for op in ops:
            path = self._rooted(op.path)
            size += len(path) + len(op.value) + OP_BYTES
            if op.kind == "check":
                requests.append(CheckVersion(path, op.version))
            elif op.kind == "create":
                requests.append(Create(path, op.value, self._acl, 1 if op.ephemeral else 0))
            elif op.kind == "delete":
                requests.append(Delete(path, op.version))
            else:
                requests.append(SetData(path, op.value, op.version))
        loop = self._loop or asyncio.get_running_loop()
        fut: asyncio.Future[list[Any]] = loop.create_future()
        self._write_later(PendingWrite(requests, size, ops[0].path, fut))
        results = await fut
        out: list[BaseException | None] = []
        for op, result in zip(ops, results, strict=True):
            if isinstance(result, RolledBackError):
                out.append(MetadataError(f"{op.kind} {op.path}: rolled back"))
            elif isinstance(result, BaseException):
                out.append(_translate(result, op.path, op.version))
            else:
                out.append(None)
        return out

    def _write_later(self, *writes: PendingWrite) -> None:
        """``writes`` sent once this turn ends, with every other transaction made in it."""
        if not self._writes:
            (self._loop or asyncio.get_running_loop()).call_soon(self._send_writes)
        self._writes.extend(writes)

    def _send_writes(self) -> None:
        """The transactions gathered this turn, together (each group one slot of
        ``MAX_IN_FLIGHT``)."""
        writes, self._writes = self._writes, []
        for group in together(writes):
            self._send_group(
                group[0].path,
                functools.partial(self._queue_writes, group),
                functools.partial(_fail_writes, group),
            )

    def _queue_writes(self, group: list[PendingWrite]) -> None:
        """Hands ``group`` to kazoo as one ``multi``, a slot taken for it."""
        request = Transaction([r for write in group for r in write.requests])
        answer = GroupAnswer(self._to_loop(), functools.partial(self._writes_answered, group))
        try:
            self._client._call(request, answer)
        except BaseException as exc:
            self._slots.give()
            _fail_writes(group, _translate(exc, group[0].path, -1))

    def _writes_answered(
        self, group: list[PendingWrite], results: list[Any] | None, exc: BaseException | None
    ) -> None:
        """On the loop: the answer to transactions sent together, each its own; those only
        rolled back by another's failure go again."""
        self._slots.give()
        if results is None or len(results) != sum(len(w.requests) for w in group):
            err = exc or MetadataError(
                f"ZooKeeper answered {len(group)} transactions with {results!r}"
            )
            _fail_writes(group, _translate(err, group[0].path, -1))
            return
        again = settle(group, results)
        if again:
            self._write_later(*again)

    async def children(self, path: str) -> list[str]:
        return list(await self._send(path, -1, GetChildren(self._rooted(path), None)))

    async def exists(self, path: str) -> ZnodeStat | None:
        stat: ZnodeStat | None = await self._send(path, -1, Exists(self._rooted(path), None))
        return stat

    async def ensure_path(self, path: str) -> None:
        # Look first: on a protected tree a client without the digest may read a node but
        # not create it, and ZooKeeper checks the permission before the node's existence.
        if await self.exists(path) is not None:
            return
        with contextlib.suppress(NodeExists):
            await self.create(path, b"", makepath=True)

    async def ensure_shared(self, path: str) -> None:
        """A node several regions live under (``/hedwig``): anyone may create a child (another
        pool's region, with its own digest); only its creator may change or delete it. One made
        before by a single region's digest, where no other pool could create its region, is
        opened up by that region's hubs, which hold ADMIN on it."""
        if self._shared_acl is None:
            await self.ensure_path(path)
            return
        acl = self._shared_acl
        if await self.exists(path) is None:
            with contextlib.suppress(NodeExists):
                await self._call(
                    path, -1, lambda: self._client.create_async(path, b"", acl=acl, makepath=True)
                )
            return
        current, _ = await self._call(path, -1, lambda: self._client.get_acls_async(path))
        if any(a.id.scheme == "world" and a.perms & Permissions.CREATE for a in current):
            return
        with contextlib.suppress(MetadataError):  # not ours to change: its owner opens it
            merged = [*current, acl[1]]
            await self._call(path, -1, lambda: self._client.set_acls_async(path, merged))

    def watch(self, path: str, callback: Callable[[], None], version: int | None = None) -> None:
        """One-shot: ``callback`` runs on the loop when ``path`` changes or is deleted.

        If the node is already gone when the watch is registered (it was deleted between our
        last read and now), the callback runs at once: a watcher must never miss a deletion;
        likewise if it is no longer at ``version`` (the one the caller read or wrote).
        """
        self._set_watch(path, self._one_shot(callback), version)

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
        object. ``key``: the end of a path of the kind given to ``file_watches_by_end``, a
        string the caller keeps anyway; kazoo's record files the watch by it instead of by a
        path of its own."""
        self._set_watch(path, _OneShot(self._to_loop(), callback, key, arg), version)

    def file_watches_by_end(self, prefix: str, suffix: str) -> None:
        """Watches of ``prefix + key + suffix`` set with their ``key`` are kept by it (one
        per owned topic: its owner record)."""
        self._client.file_by_end(prefix, suffix)

    def _set_watch(self, path: str, on_event: Callable[[Any], None], version: int | None) -> None:
        if self._closed:
            return
        if self._unset or not self._client.connected or not self._room_for_watches():
            # Not handed to kazoo now (see MAX_IN_FLIGHT): set once it is connected and has
            # room, a change meanwhile seen then as a version other than ``version``. Not
            # fired: its holder would read the record, fail while ZooKeeper is away, and
            # watch again at once, for as long as it is away.
            self._unset.append((path, on_event, version))
            self._set_watches()
            return
        self._register_watch(path, on_event, version)

    def _register_watch(
        self, path: str, on_event: Callable[[Any], None], version: int | None
    ) -> None:
        """Set once the turn ends, with the others set in it (``SetWatches``)."""
        if not self._watch_together:
            try:
                self._client._call(
                    Exists(self._rooted(path), on_event), _WatchSet(on_event, version)
                )
            except BaseException:
                on_event(None)
            return
        group = self._watch_group
        group.append(_Watch(path, on_event, version))
        if len(group) == 1:
            (self._loop or asyncio.get_running_loop()).call_soon(self._send_watch_group)
        elif len(group) >= MAX_WATCHES:
            self._send_watch_group()

    def _send_watch_group(self) -> None:
        """The watches gathered this turn, in one request; those that expect a version read
        back once it is answered (``hedwig.metadata.zookeeper.setwatches``)."""
        group, self._watch_group = self._watch_group, []
        if not group:  # sent already: the turn filled a request
            return
        request = SetWatches(
            self._client, [self._rooted(w.path) for w in group], [w.on_event for w in group]
        )
        answer = GroupAnswer(self._to_loop(), functools.partial(self._watch_group_set, group))
        try:
            self._client._call(request, answer)
        except BaseException as exc:
            self._watch_group_set(group, None, exc)

    def _watch_group_set(
        self, group: list[_Watch], _result: Any, exc: BaseException | None
    ) -> None:
        """On the loop: ``group``'s ``SetWatches`` answered. Failed, each watcher fires (its
        holder reads again, and watches again); set, the records whose version a watcher
        expects are read back, in one request."""
        if exc is not None:
            if isinstance(exc, UnimplementedError):  # pragma: no cover - every ZooKeeper has it
                log.warning("ZooKeeper does not set many watches at once; one by one")
                self._watch_together = False
            for watch in group:
                watch.on_event(None)
            return
        expecting = [w for w in group if w.version is not None]
        if not expecting:
            return
        if not self._read_together:  # a ZooKeeper older than 3.6: each read alone
            for watch in expecting:
                self._spawn(self._read_back_alone(watch))
            return
        self._send_group(
            expecting[0].path,
            functools.partial(self._queue_read_back, expecting),
            functools.partial(_fire_all, expecting),
        )

    def _queue_read_back(self, group: list[_Watch]) -> None:
        """Hands the read-back of ``group``'s records to kazoo, a slot taken for it."""
        request = MultiRead([self._rooted(w.path) for w in group])
        answer = GroupAnswer(self._to_loop(), functools.partial(self._read_back, group))
        try:
            self._client._call(request, answer)
        except BaseException:
            self._slots.give()
            _fire_all(group)

    def _read_back(
        self, group: list[_Watch], results: list[Any] | None, exc: BaseException | None
    ) -> None:
        """On the loop: each record of ``group`` as read once its watch was set; a watcher
        whose record is gone or no longer at its version fires (all do if the read failed:
        each holder reads again)."""
        self._slots.give()
        if exc is not None or results is None or len(results) != len(group):
            _fire_all(group)
            return
        for watch, result in zip(group, results, strict=True):
            if isinstance(result, BaseException) or result[1].version != watch.version:
                watch.on_event(None)

    async def _read_back_alone(self, watch: _Watch) -> None:
        try:
            stat = await self.exists(watch.path)
        except MetadataError:
            stat = None
        if stat is None or stat.version != watch.version:
            watch.on_event(None)

    def _room_for_watches(self) -> bool:
        return len(self._client._queue) < MAX_UNSENT_WATCHES  # kazoo's (2.11) unsent requests

    def _set_watches(self) -> None:
        """Set the watches waiting here while kazoo is connected and has room; come back
        shortly if it has none (once connected again, if it is not)."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        unset = self._unset
        while unset and not self._closed and self._client.connected and self._room_for_watches():
            self._register_watch(*unset.popleft())
        if unset and not self._closed and self._client.connected:
            loop = self._loop or asyncio.get_running_loop()
            self._flushing = loop.call_later(0.01, self._set_watches)

    def _one_shot(self, callback: Callable[[], None]) -> Callable[[Any], None]:
        """A kazoo watch function that runs ``callback`` on the loop, once, however many of
        the watches it is given to fire."""
        return _OneShot(self._to_loop(), callback)

    def _to_loop(self) -> _Crossing:
        """The crossing to this bridge's loop (the running one until ``start`` names it)."""
        if self._crossing is None:
            self._crossing = _Crossing(self._loop or asyncio.get_running_loop())
        return self._crossing

    async def children_watched(self, path: str, watch: Callable[[Any], None]) -> list[str]:
        """The children of ``path``; ``watch`` (from ``_one_shot``) fires when they change."""
        return list(await self._send(path, -1, GetChildren(self._rooted(path), watch)))

    async def exists_watched(self, path: str, watch: Callable[[Any], None]) -> ZnodeStat | None:
        """Whether ``path`` exists; ``watch`` fires when it is created, changed or deleted."""
        stat: ZnodeStat | None = await self._send(path, -1, Exists(self._rooted(path), watch))
        return stat

    async def get_watched(
        self, path: str, watch: Callable[[Any], None]
    ) -> tuple[bytes, ZnodeStat] | None:
        """``path``'s data (``None`` if gone); ``watch`` fires when it changes or goes."""
        try:
            data, stat = await self._send(path, -1, GetData(self._rooted(path), watch))
        except NoNode:
            return None
        return bytes(data or b""), stat


def _fail_reads(reads: Sequence[PendingRead], exc: BaseException) -> None:
    for read in reads:
        if not read.fut.done():
            read.fut.set_exception(exc)


def _fail_writes(writes: Sequence[PendingWrite], exc: BaseException) -> None:
    for write in writes:
        if not write.fut.done():
            write.fut.set_exception(exc)


class _Answer:
    """What kazoo's connection thread completes for a request sent by ``ZkBridge._send``, in
    place of its ``AsyncResult``: the answer, translated, crosses to the loop to complete the
    caller's future and give its slot back. kazoo calls ``set`` or ``set_exception`` once (and
    tests the object's truth first: it is true)."""

    __slots__ = ("_crossing", "_fut", "_path", "_slots", "_version")

    def __init__(
        self,
        crossing: _Crossing,
        slots: _Slots,
        fut: asyncio.Future[Any],
        path: str,
        version: int,
    ) -> None:
        self._crossing = crossing
        self._slots = slots
        self._fut = fut
        self._path = path
        self._version = version

    def set(self, value: Any = None) -> None:
        self._crossing.call(self._slots.answered, self._fut, value, None)

    def set_exception(self, exc: BaseException) -> None:
        err = _translate(exc, self._path, self._version)
        self._crossing.call(self._slots.answered, self._fut, None, err)


class _Watch(NamedTuple):
    """A watch waiting for its turn to end (``ZkBridge._register_watch``)."""

    path: str
    on_event: Callable[[Any], None]
    version: int | None


def _fire_all(group: Sequence[_Watch], _exc: BaseException | None = None) -> None:
    for watch in group:
        watch.on_event(None)


class _WatchSet:
    """The answer to an ``exists`` that sets a watch (``ZkBridge._register_watch``): the watch
    fires at once if the node is gone, has changed since ``version``, or the request failed."""

    __slots__ = ("_on_event", "_version")

    def __init__(self, on_event: Callable[[Any], None], version: int | None) -> None:
        self._on_event = on_event
        self._version = version

    def set(self, stat: Any = None) -> None:
        if stat is None or (self._version is not None and stat.version != self._version):
            self._on_event(None)

    def set_exception(self, exc: BaseException) -> None:
        self._on_event(None)


class _Slots:
    """At most ``limit`` requests in kazoo's hands, counted on the event loop: a slot is taken
    before a request goes to kazoo and given back when its answer reaches the loop. A slot
    given back while requests wait passes to the first of them (it stays taken, so a request
    arriving meanwhile cannot jump the queue); while the connection is down, a request that
    finds no slot is refused at once instead (nothing gives one back until it returns)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        # Each waiter's result: ``True``, a slot passed to it; ``False``, woken to look at
        # the connection again (``wake_all``).
        self._waiters: collections.deque[asyncio.Future[bool]] = collections.deque()

    def take_now(self) -> bool:
        """A slot if one is free and nobody waits for one."""
        if self.used < self.limit and not self._waiters:
            self.used += 1
            return True
        return False

    async def take(self, bridge: ZkBridge, path: str) -> None:
        while not self.take_now():
            if bridge.state is not SessionState.CONNECTED:
                raise MetadataUnavailableError(
                    f"ZooKeeper unavailable (not connected, {self.used} requests waiting) at {path}"
                )
            waiter: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                passed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled() and waiter.result():
                    self.give()  # passed a slot it will not use: to the next one
                raise
            if passed:
                return

    def give(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(True)
                return
        self.used -= 1

    def answered(self, fut: asyncio.Future[Any], value: Any, exc: BaseException | None) -> None:
        self.give()
        if fut.done():
            return
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(value)

    def wake_all(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(False)


_NO_ARG: Any = object()  # a ``_OneShot`` whose callback takes no argument


class _OneShot:
    """A kazoo watch function that runs a callback on the loop, once (the callback is let go
    when it fires). Kazoo keeps one per watched node (a topic's owner record, for every owned
    topic): an object with three slots is a third of the closure it replaces. ``key``: the
    end of its path that kazoo's record may file it by (``WatcherRecord``)."""

    __slots__ = ("arg", "callback", "key", "to_loop")

    def __init__(
        self,
        to_loop: _Crossing,
        callback: Callable[..., None],
        key: str | None = None,
        arg: Any = _NO_ARG,
    ) -> None:
        self.to_loop = to_loop
        self.callback: Callable[..., None] | None = callback
        self.key = key
        self.arg = arg

    def __call__(self, _event: Any) -> None:
        callback = self.callback
        if callback is not None:
            self.callback = None
            if self.arg is _NO_ARG:
                self.to_loop.call(callback)
            else:
                self.to_loop.call(callback, self.arg)
