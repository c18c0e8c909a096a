"""The state one simulated cluster shares: its keyed records, watches, counters and sessions.

Several ``MemoryMetadataStore`` objects on one ``MemoryBackend`` behave like hubs sharing one
store. A record is kept under a tuple key (its region first) with a version, and, for records
that die with their session (owner records, alive records), the session's id. Watches are
one-shot callbacks filed by key, fired on the event loop by whatever creates, writes or deletes
the key. Writes are numbered in order, as ZooKeeper's zxids, on a count of their own, so ledger
ids and session ids do not depend on how many writes were made. ``expire`` ends a session as
ZooKeeper does after a long partition.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hedwig.metadata.managers import SessionState

if TYPE_CHECKING:
    from hedwig.metadata.memory.session import MemorySession


@dataclass
class Entry:
    value: Any
    version: int = 0
    session: int | None = None  # set for records that die with their session
    czxid: int = 0
    # When it was created and last written, in the order of writes (ZooKeeper's zxids).
    made: int = 0
    mzxid: int = 0


@dataclass
class MemoryBackend:
    """The shared state; one per simulated cluster."""

    data: dict[tuple[str, ...], Entry] = field(default_factory=dict)
    watches: dict[tuple[str, ...], list[Callable[[], None]]] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # The order of writes, as ZooKeeper's zxids (``mzxid``); its own count, so ledger ids and
    # session ids do not depend on how many writes were made.
    writes: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    sessions: dict[int, MemorySession] = field(default_factory=dict)

    def fire(self, key: tuple[str, ...]) -> None:
        for cb in self.watches.pop(key, []):
            asyncio.get_running_loop().call_soon(cb)

    def expire(self, session: int) -> None:
        """End a session: its records go; its store learns it at once if connected, else when
        it reconnects (as a ZooKeeper client cut off from the server does)."""
        for key in [k for k, e in self.data.items() if e.session == session]:
            del self.data[key]
            self.fire(key)
        store = self.sessions.pop(session, None)
        if store is not None and store.state is SessionState.CONNECTED:
            store.lose_session()
