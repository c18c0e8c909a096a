"""One store's session on the backend, and the versioned records it reads and writes.

A session is connected, suspended (the connection lost, the session kept: operations fail
until ``reconnect``, as a ZooKeeper client's do while its server is away briefly) or lost (the
session ended: its ephemeral records are gone); every change is told to the listeners. Every
read and write checks the session first, so a store that is not connected refuses with
``MetadataUnavailableError`` as the real stores do. Records are created only where none is, and
written or deleted only at the version expected (``ANY_VERSION``: whatever is stored), else
``BadVersionError``; each write fires the key's watches.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

from hedwig.errors import BadVersionError, MetadataUnavailableError
from hedwig.metadata.managers import SessionState
from hedwig.metadata.memory.backend import Entry, MemoryBackend
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION, Version


class MemorySession:
    def __init__(self, backend: MemoryBackend, region: str) -> None:
        self.region = region
        self._b = backend
        self._session_id = 0
        self._state = SessionState.SUSPENDED
        self._listeners: list[Callable[[SessionState], None]] = []

    # session ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._session_id = next(self._b.counter)
        self._b.sessions[self._session_id] = self
        self._set_state(SessionState.CONNECTED)

    async def close(self) -> None:
        self._b.expire(self._session_id)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def expire(self) -> None:
        """Expire this store's session, as ZooKeeper would after a long partition."""
        self._b.expire(self._session_id)

    def disconnect(self) -> None:
        """Lose the connection but keep the session, as a ZooKeeper client does when its
        server goes away briefly: operations fail until ``reconnect``."""
        if self._state is SessionState.CONNECTED:
            self._set_state(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        if self._state is not SessionState.SUSPENDED:
            return
        if self._session_id in self._b.sessions:
            self._set_state(SessionState.CONNECTED)
        else:
            self.lose_session()  # the session ended while we were away

    def lose_session(self) -> None:
        """The session ended (``MemoryBackend.expire``): tell the listeners."""
        self._set_state(SessionState.LOST)

    def _set_state(self, state: SessionState) -> None:
        self._state = state
        for listener in list(self._listeners):
            listener(state)

    @property
    def state(self) -> SessionState:
        return self._state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    # versioned records --------------------------------------------------------------------

    def _check(self) -> None:
        if self._state is not SessionState.CONNECTED:
            raise MetadataUnavailableError("memory store session is not connected")

    def _k(self, *parts: str) -> tuple[str, ...]:
        return (self.region, *parts)

    def _get(self, key: tuple[str, ...]) -> Entry | None:
        self._check()
        return self._b.data.get(key)

    def _create(self, key: tuple[str, ...], value: Any, *, ephemeral: bool = False) -> Entry:
        self._check()
        if key in self._b.data:
            raise BadVersionError.at("/".join(key), NEW_VERSION)
        session = self._session_id if ephemeral else None
        made = next(self._b.writes)
        entry = Entry(value, 0, session, next(self._b.counter), made, made)
        self._b.data[key] = entry
        self._b.fire(key)
        return entry

    def _set(self, key: tuple[str, ...], value: Any, version: Version, missing: Exception) -> int:
        entry = self._get(key)
        if entry is None:
            raise missing
        if version != ANY_VERSION and entry.version != version:
            raise BadVersionError.at("/".join(key), version)
        entry.value = value
        entry.version += 1
        entry.mzxid = next(self._b.writes)
        self._b.fire(key)
        return entry.version

    def _delete(self, key: tuple[str, ...], version: Version, missing: Exception) -> None:
        entry = self._get(key)
        if entry is None:
            raise missing
        if version != ANY_VERSION and entry.version != version:
            raise BadVersionError.at("/".join(key), version)
        del self._b.data[key]
        self._b.fire(key)
