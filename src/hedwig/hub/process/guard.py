"""The running hub's access control over time: who may drain it, connections whose
credentials expired, and subscriptions whose principal lost its permission.

Admission (``hedwig.hub.front.access``) decides each request as it comes; what is decided
once stays decided for a connection's life unless something here takes it back:

- ``drain_allowed``: ``POST /drain`` through the hub's local socket (a preStop hook), or with a
  token whose principal may administer the cluster. A hub without authentication also drains
  for a caller at 127.0.0.1 or ::1, as its client port serves RELEASE_TOPIC to anyone; with
  authentication no peer address is enough (a mesh's sidecar forwards callers from anywhere
  from loopback addresses).
- ``close_expired``: every ``EXPIRY_CHECK_S``, connections whose token or certificate expired
  are closed (a client re-authenticates before that).
- ``rules_changed``: new ACL rules forget cached decisions and close the subscriptions whose
  connections may no longer subscribe (later publishes are refused by admission), each
  consumer of a queue on its own, since a queue's consumers may be different principals.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping

from hedwig.clock import Clock
from hedwig.hub.front.access import AccessControl
from hedwig.hub.front.server import ClientConnection
from hedwig.hub.process.http import DrainCaller
from hedwig.hub.serving.topic_subscriptions import Served
from hedwig.metadata.acls import Operation
from hedwig.protocol import CloseReason
from hedwig.security.acl import AclSet

# How often connections whose credentials expired are looked for, in seconds.
EXPIRY_CHECK_S = 5.0

# The subscriptions served here, by topic: owned topics' and fan-out deliveries'.
ServedSubscriptions = Callable[[], Iterable[tuple[str, Mapping[str, Served]]]]


class HubGuard:
    def __init__(
        self,
        *,
        access: AccessControl,
        authenticate: bool,
        clock: Clock,
        connections: Callable[[], Iterable[ClientConnection]],
        served: ServedSubscriptions,
    ) -> None:
        self._access = access
        self._authenticate = authenticate
        self._clock = clock
        self._connections = connections
        self._served = served

    async def drain_allowed(self, caller: DrainCaller) -> bool:
        """Whether ``caller`` may ``POST /drain`` (the module's first rule)."""
        if caller.local_socket:
            return True
        if not self._authenticate and caller.peer_host in ("127.0.0.1", "::1"):
            return True
        if caller.token is None or not self._access.verifier:
            return False
        try:
            principal = await self._access.verifier.verify(caller.token)
        except Exception:
            return False
        return self._access.cluster_admin(principal)

    async def close_expired(self) -> None:
        """Close connections whose credentials expired, every ``EXPIRY_CHECK_S``, for good."""
        while True:
            await self._clock.sleep(EXPIRY_CHECK_S)
            self._access.close_expired(
                list(self._connections()),
                lambda conn: conn.close(),  # type: ignore[attr-defined]
            )

    def rules_changed(self, acls: AclSet) -> None:
        """New ACL rules: forget cached decisions, and close the subscriptions whose
        connections may no longer subscribe."""
        self._access.set_acls(acls)
        for name, subs in self._served():
            for sub in list(subs.values()):
                for peer in sub.peers:
                    if isinstance(peer, ClientConnection) and not self._access.allowed(
                        peer, Operation.SUBSCRIBE, name
                    ):
                        sub.close_peer(
                            peer,
                            CloseReason.ACCESS_REVOKED,
                            f"principal {peer.principal.name} may no longer subscribe to "
                            f"topic {name!r}",
                        )
                        asyncio.get_running_loop().create_task(sub.flush())
