"""The way from a caller to the server: admission (connected, a slot) and sending.

Every request goes through here. ``call`` is one request for one caller: admitted (refused
at once while the session is not connected; a slot of ``hedwig.metadata.zookeeper.client.
slots`` taken, at once if one is free), sent on the session's connection, its answer (or its
error code, mapped by ``codes.error_for``) back on the caller's future, its slot given back.
A request made for many callers (``reads``, ``writes``, ``watches``) is admitted once with
``send_group`` and answered through its own ``Answer``.

Everything a turn of the loop asks goes out together when the turn ends (``at_turn_end``):
the requests for many callers are made then (the reads, transactions and watches of the
turn), and everything sent is written in one write, in the same callback. A request made in a
turn is written in the next turn of the loop, not the one after (a busy loop's turn takes
milliseconds: a claim is a few such waits).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.zookeeper.client.codes import CONNECTION_LOSS, NO_NODE, error_for
from hedwig.metadata.zookeeper.client.connection import Answer
from hedwig.metadata.zookeeper.client.keeper import SessionKeeper
from hedwig.metadata.zookeeper.client.records import Request
from hedwig.metadata.zookeeper.client.slots import Slots


class Channel:
    """Admission and sending for one session's requests."""

    def __init__(self, keeper: SessionKeeper, limit: int) -> None:
        self.keeper = keeper
        self.slots = Slots(limit, lambda: keeper.connected)
        self._tasks: set[asyncio.Task[None]] = set()
        self._turn_end: list[Callable[[], None]] = []  # what to do as this turn ends
        self._scheduled = False  # the turn's end is (``_end_turn`` will run)
        self._ending = False  # it is running

    def admitted_now(self, path: str) -> bool:
        """A slot for a request on ``path`` taken at once, while connected; ``False`` if it
        must wait for one (``admit``). Almost every request finds one free."""
        if not self.keeper.connected:
            raise MetadataUnavailableError(f"ZooKeeper unavailable (not connected) at {path}")
        return self.slots.take_now()

    async def admit(self, path: str) -> None:
        """A slot for a request on ``path``, waited for, while connected."""
        await self.slots.take(path)
        if not self.keeper.connected:  # lost while waiting for a slot
            self.slots.give()
            raise MetadataUnavailableError(f"ZooKeeper unavailable (not connected) at {path}")

    def send(self, request: Request, answer: Answer) -> None:
        """``request`` on the session's connection, admitted already; written as this turn
        ends."""
        connection = self.keeper.connection
        if connection is None:
            answer(CONNECTION_LOSS, None)
            return
        connection.send(request, answer, flush=False)
        self._schedule()

    def at_turn_end(self, make: Callable[[], None]) -> None:
        """``make`` (the requests of a turn for many callers) once this turn ends, before its
        requests are written."""
        self._turn_end.append(make)
        self._schedule()

    def _schedule(self) -> None:
        if not (self._scheduled or self._ending):
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._end_turn)

    def _end_turn(self) -> None:
        self._scheduled = False
        self._ending = True
        try:
            while self._turn_end:
                makes, self._turn_end = self._turn_end, []
                for make in makes:
                    try:
                        make()
                    except Exception as exc:  # as the loop does with a callback: report it
                        asyncio.get_running_loop().call_exception_handler(
                            {"message": "making ZooKeeper requests failed", "exception": exc}
                        )
        finally:
            self._ending = False
        connection = self.keeper.connection
        if connection is not None:
            connection.flush()

    async def call(
        self,
        request: Request,
        path: str,
        version: int = -1,
        *,
        missing: bool = False,
        then: Callable[[int], None] | None = None,
    ) -> Any:
        """``request``'s answer; ZooKeeper's error as an exception (``missing``: a missing
        znode answers ``None``, not ``NoNode``). ``then(err)`` runs as the answer arrives,
        before anything the connection reads after it (a watch recorded there cannot miss a
        notification that follows the answer)."""
        if not self.admitted_now(path):
            await self.admit(path)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.send(request, _Reply(fut, self.slots, path, version, missing, then))
        return await fut

    def send_group(
        self, path: str, send: Callable[[], None], fail: Callable[[MetadataError], None]
    ) -> None:
        """``send`` a request made for many callers once a slot is taken for it (at once if
        one is free); ``fail`` them if none can be."""
        try:
            admitted = self.admitted_now(path)
        except MetadataError as exc:
            fail(exc)
            return
        if admitted:
            send()
        else:
            self.spawn(self._send_admitted(path, send, fail))

    async def _send_admitted(
        self, path: str, send: Callable[[], None], fail: Callable[[MetadataError], None]
    ) -> None:
        try:
            await self.admit(path)
        except MetadataError as exc:
            fail(exc)
            return
        send()

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class _Reply:
    """A ``call``'s answer: its slot back, then its result or error on the caller's
    future."""

    __slots__ = ("_fut", "_missing", "_path", "_slots", "_then", "_version")

    def __init__(
        self,
        fut: asyncio.Future[Any],
        slots: Slots,
        path: str,
        version: int,
        missing: bool,
        then: Callable[[int], None] | None,
    ) -> None:
        self._fut = fut
        self._slots = slots
        self._path = path
        self._version = version
        self._missing = missing
        self._then = then

    def __call__(self, err: int, result: Any) -> None:
        self._slots.give()
        if self._then is not None:
            self._then(err)
        fut = self._fut
        if fut.done():
            return
        if err == 0:
            fut.set_result(result)
        elif err == NO_NODE and self._missing:
            fut.set_result(None)
        else:
            fut.set_exception(error_for(err, self._path, self._version))
