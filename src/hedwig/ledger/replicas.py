"""Storage addresses to replicas: this hub's own disk, or another hub's storage role.

Ledger writers, readers, recovery and the auditor reach replicas through a ``Replicas``
directory. A hub's own (``LocalFirstReplicas``) answers its own address with its disk and
remembers replicas that failed lately, so reads try them last; tools outside a hub
(``hedwig ledgers``) reach every replica over the wire (``RemoteReplicas``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from hedwig.clock import Clock, SystemClock
from hedwig.ledger.remote import RemoteStorage, Resolve
from hedwig.ledger.storage import LocalStorage, StorageNode
from hedwig.net.transport import TCP, Network

# A replica that failed a request is tried last for this long.
SUSPECT_FOR_S = 10.0


class Replicas(Protocol):
    """Maps storage addresses to replicas, and remembers which ones failed lately."""

    def node(self, address: str) -> StorageNode: ...

    def preferred(self, addresses: Sequence[str]) -> list[str]:
        """``addresses`` in the order to try them for a read: local first, suspects last."""
        ...

    def suspect(self, address: str) -> None:
        """Note that ``address`` just failed a request."""
        ...

    def suspected(self, address: str) -> bool:
        """Whether ``address`` failed a request lately (``suspect``)."""
        ...


class LocalFirstReplicas:
    """A hub's directory: its own disk for its own address, connections for the others."""

    def __init__(
        self,
        local: LocalStorage,
        *,
        network: Network = TCP,
        clock: Clock | None = None,
        resolve: Resolve | None = None,
        forget: Callable[[str], None] | None = None,
    ) -> None:
        self.local = local
        self._network = network
        # Other hubs' storage roles are on their internal listeners when they have one.
        self._resolve = resolve
        self._forget = forget
        self._clock = clock or SystemClock()
        self._remote: dict[str, RemoteStorage] = {}
        self._suspects: dict[str, float] = {}

    def preferred(self, addresses: Sequence[str]) -> list[str]:
        now = self._clock.monotonic()

        def rank(a: str) -> int:
            if a == self.local.address:
                return 0
            return 2 if self._suspects.get(a, 0.0) > now else 1

        return sorted(addresses, key=rank)

    def suspect(self, address: str) -> None:
        self._suspects[address] = self._clock.monotonic() + SUSPECT_FOR_S

    def suspected(self, address: str) -> bool:
        """``address`` failed a request within ``SUSPECT_FOR_S``."""
        return self._suspects.get(address, 0.0) > self._clock.monotonic()

    def node(self, address: str) -> StorageNode:
        if address == self.local.address:
            return self.local
        return self.remote(address)

    def remote(self, address: str) -> RemoteStorage:
        """The connection to another hub's storage role (made at first use)."""
        node = self._remote.get(address)
        if node is None:
            node = self._remote[address] = RemoteStorage(
                address,
                network=self._network,
                clock=self._clock,
                resolve=self._resolve,
                forget=self._forget,
                on_failure=self.suspect,
            )
        return node

    def close(self) -> None:
        for node in self._remote.values():
            node.close()
        self._remote.clear()


class Unsuspecting:
    """The half of ``Replicas`` for a directory that keeps no suspicion: reads try the
    replicas in the order given, and none is ever suspected."""

    def preferred(self, addresses: Sequence[str]) -> list[str]:
        return list(addresses)

    def suspect(self, address: str) -> None:
        return None

    def suspected(self, address: str) -> bool:
        return False


class RemoteReplicas(Unsuspecting):
    """Every replica over the wire: for tools that run outside a hub (``hedwig ledgers``)."""

    def __init__(self, *, network: Network = TCP, resolve: Resolve | None = None) -> None:
        self._network = network
        self._resolve = resolve
        self._remote: dict[str, RemoteStorage] = {}

    def node(self, address: str) -> StorageNode:
        node = self._remote.get(address)
        if node is None:
            node = self._remote[address] = RemoteStorage(
                address, timeout_s=3.0, network=self._network, resolve=self._resolve
            )
        return node

    def close(self) -> None:
        for node in self._remote.values():
            node.close()
