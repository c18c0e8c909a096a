"""The etcd client: one process's connection to etcd, its session, its watches and its
transactions, behind the one object the store's managers share.

Each part is a module of its own, and this one puts them together:

- ``connection``: the gRPC channels, the credentials and their tokens, and etcd's errors as
  Hedwig's (the only module that sees gRPC's);
- ``session`` and ``lease_keeper``: **the lease is the session**: one lease granted at start
  and refreshed on the injected clock, reported as ``SessionState`` by the session's state
  table, with the owner records' leases refreshed alongside;
- ``watch_stream`` and ``watches``: every watch of the process on one etcd watch stream, owner
  and plan watches each on one watch of their prefix;
- ``kv``, ``batches`` and ``wire``: reads and transactions, written as bytes and sent together
  while others are under way.

Every wait of the client (a refresh's time, a call's deadline, a watch's back-off, the start's
retries) is on the ``hedwig.clock.Clock`` it is given (the system clock by default).
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.clock import Clock, SystemClock
from hedwig.errors import MetadataError
from hedwig.metadata.etcd.batches import TxnBatcher
from hedwig.metadata.etcd.connection import (
    CALL_TIMEOUT_S,
    NO_CREDENTIALS,
    Connection,
    EtcdCredentials,
)
from hedwig.metadata.etcd.kv import KeyValues, prefix_end
from hedwig.metadata.etcd.lease_keeper import LeaseKeeper
from hedwig.metadata.etcd.watch_stream import Once, WatchStream
from hedwig.metadata.managers import SessionState

# How long ``start`` tries to reach etcd before it gives up.
START_TIMEOUT_S = 15.0


class EtcdClient:
    """One connection to etcd, and this process's lease on it."""

    def __init__(
        self,
        target: str,
        *,
        ttl_s: float,
        credentials: EtcdCredentials = NO_CREDENTIALS,
        clock: Clock | None = None,
    ) -> None:
        self.clock = clock or SystemClock()
        self.connection = Connection(target, clock=self.clock, credentials=credentials)
        self.keeper = LeaseKeeper(
            self.connection, ttl_s=ttl_s, clock=self.clock, call_timeout_s=CALL_TIMEOUT_S
        )
        self.watches = WatchStream(self.connection, clock=self.clock)
        # Every single-key read and transaction goes through it (``batches``).
        self.batcher = TxnBatcher(self.connection.send_txn)
        kv = KeyValues(self.connection, self.batcher)
        # Bound here, not wrapped: a transaction is the store's commonest call.
        self.txn = kv.txn
        self.get = kv.get
        self.range = kv.range
        self.owner_lease = self.keeper.owner_lease
        self.call = self.connection.call
        self._started = False

    @property
    def target(self) -> str:
        return self.connection.target

    @property
    def ttl(self) -> int:
        """The session's TTL in whole seconds."""
        return self.keeper.session.ttl

    @property
    def lease(self) -> int:
        """The session's own lease (the alive record's)."""
        return self.keeper.session.lease

    @property
    def leases(self) -> list[int]:
        """Every lease of the session: its own, then its owner records'."""
        return self.keeper.leases

    @property
    def state(self) -> SessionState:
        return self.keeper.session.state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        """Called on the event loop at every change of ``state``."""
        self.keeper.session.add_listener(listener)

    async def start(self, timeout: float = START_TIMEOUT_S) -> None:
        self.connection.open()
        try:
            await self.keeper.start(timeout)
        except MetadataError:
            # Unreachable until the deadline, or refused (credentials): trying again won't help.
            await self.connection.close()
            raise
        self._started = True

    async def grant(self) -> int:
        """A new lease with the session's TTL (refreshed only if the session owns it)."""
        return await self.keeper.grant()

    async def revoke_elsewhere(self, lease: int) -> None:
        """Revoke ``lease`` (tests: another process's session expires at once)."""
        await self.keeper.revoke_elsewhere(lease)

    async def close(self) -> None:
        """Stop; like closing a ZooKeeper session, the ephemeral records go now, not after a
        TTL."""
        await self._stop_tasks()
        await self.keeper.close(revoke=True)
        await self.connection.close()

    async def drop(self) -> None:
        """Stop refreshing the session's leases and close, revoking nothing: what ``kill -9``
        of the process leaves etcd (benchmarks, tests)."""
        await self._stop_tasks()
        await self.keeper.close(revoke=False)
        await self.connection.close()

    async def _stop_tasks(self) -> None:
        await self.keeper.stop()
        await self.watches.close()
        await self.batcher.close()

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
        assert self._started, "start the client first"
        self.watches.watch(key, prefix_end(key) if prefix else b"", after + 1, Once(callback))
