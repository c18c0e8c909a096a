"""The trust boundary at a hub's door: who a connection is, and whether it may send this frame.

Every request passes ``AccessControl.admit`` before it is served (``hedwig.hub.front.server``), with
these rules, in order:

1. The **internal listener** serves hubs of the region only: its TLS handshake already required
   a certificate from the region's hub CA, so every connection there is a hub. It serves the
   storage role (ADD_ENTRY, READ_ENTRY, READ_LAC, DELETE_LEDGER), claim requests (TOPIC_STATS
   with the redirected flag), delivery hubs' tails of a fan-out topic (TAIL_TOPIC), a queue
   owner's dead letters (PUBLISH, checked for the subscription's creator by the hub that
   sends them) and PING; anything else is FORBIDDEN there.
2. On the **client listener** the storage frames are INTERNAL_ONLY whenever the hub has an
   internal listener: no client can add entries, fence or delete a ledger.
3. With authentication on, a connection that has not proved an identity (a verified client
   certificate, or AUTHENTICATE with a token) may send only AUTHENTICATE: everything else is
   UNAUTHENTICATED, and so is every request after its credentials expire.
4. With authorization on, each request needs its operation on its topic (``_NEEDS``), allowed
   by the region's ACLs (``hedwig.security.acl``; super-users may do everything). A request
   that would create a topic also needs ``create`` (``check_create``). Decisions are cached
   per connection, operation and topic, and forgotten when the rules change (``set_acls``),
   which is how a revoked permission takes effect on open connections. A request about the
   region rather than a topic (DESCRIBE_LINKS) needs its operation on the cluster
   (``_NEEDS_CLUSTER``).

Every refusal is counted (``hedwig_auth_denied_total{op,reason}``) and written as one JSON
line to the ``hedwig.audit`` logger, naming the principal, the operation, the topic, the peer
and the listener, each cut short if long and at a bounded rate per connection
(``hedwig.hub.front.audit``).

A client's redirected request (any request with the redirected flag) makes the hub claim an
unowned topic, on the client listener as well: that is what a redirect is for (the hub that
chose this one sent the client here), and it needs the permission its frame needs, no more
(``describe`` for TOPIC_STATS, as for READ ``read``). What only hubs send is the claim request
of a handing-off hub, which goes to the destination's internal listener (rule 1).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from enum import Enum
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import (
    AuthenticationError,
    ForbiddenError,
    HedwigError,
    InternalOnlyError,
)
from hedwig.hub.front import audit
from hedwig.hub.front.audit import MESSAGE_CHARS, AuditBudget, cut
from hedwig.hub.reporting.denials import DenialReason
from hedwig.hub.reporting.events import HubEvents
from hedwig.metadata.acls import Operation
from hedwig.protocol import (
    Ack,
    Authenticate,
    Authenticated,
    CloseSubscription,
    Consume,
    CreateSubscription,
    DeleteTopic,
    DescribeLinks,
    DescribeQueues,
    DescribeTopic,
    JoinSubscription,
    Nack,
    Ping,
    Publish,
    Read,
    ReleaseBundle,
    ReleaseTopic,
    Request,
    ResetSubscription,
    Subscribe,
    TailTopic,
    TopicStats,
    Unsubscribe,
)
from hedwig.protocol.codec import STORAGE_REQUESTS
from hedwig.protocol.names import lane_of
from hedwig.protocol.plan_frames import DeliveryStats, DescribeLanes
from hedwig.protocol.security_frames import TOKEN
from hedwig.security.acl import AclSet
from hedwig.security.principal import ANONYMOUS, Principal
from hedwig.security.tokens import LEEWAY_S, TokenVerifier

# What each request needs on the client listener: its operation on the topic it names.
_NEEDS: dict[type, Operation] = {
    Publish: Operation.PUBLISH,
    Subscribe: Operation.SUBSCRIBE,
    Consume: Operation.SUBSCRIBE,
    Unsubscribe: Operation.SUBSCRIBE,
    CloseSubscription: Operation.SUBSCRIBE,
    # Joining a subscription as one of its consumers, and acknowledging or nacking what it
    # was given: subscribing (the hub also refuses acknowledgements of messages the
    # connection does not hold).
    JoinSubscription: Operation.SUBSCRIBE,
    CreateSubscription: Operation.SUBSCRIBE,
    Ack: Operation.SUBSCRIBE,
    Nack: Operation.SUBSCRIBE,
    Read: Operation.READ,
    TopicStats: Operation.DESCRIBE,
    ReleaseTopic: Operation.ADMIN,
    # Deleting a topic destroys its data: admin. Resetting a subscription moves its consume
    # mark, as consuming does: subscribe. Describing lists its subscriptions: describe.
    DeleteTopic: Operation.ADMIN,
    ResetSubscription: Operation.SUBSCRIBE,
    DescribeTopic: Operation.DESCRIBE,
    # Describing its subscriptions as queues (consumers, unacknowledged counts): describing.
    DescribeQueues: Operation.DESCRIBE,
    # A delivery hub's tail of the owner's log, sent by a client: reading.
    TailTopic: Operation.READ,
    # How many subscribers a delivery hub serves: describing.
    DeliveryStats: Operation.DESCRIBE,
}
# Requests any one of several permissions allows: which lanes a topic has is what a subscriber,
# a reader, a describer and an admin deleting the topic each need to know.
_NEEDS_ANY: dict[type, tuple[Operation, ...]] = {
    DescribeLanes: (Operation.SUBSCRIBE, Operation.READ, Operation.DESCRIBE, Operation.ADMIN),
}
# Requests about no one topic but many tenants' at once: the region's super-users only.
SUPER_USERS_ONLY = frozenset((ReleaseBundle,))
# Requests about the region rather than a topic: any of these operations on the cluster. A
# hub's links name other regions' endpoints and how replication from them stands: operators'.
_NEEDS_CLUSTER: dict[type, tuple[Operation, ...]] = {
    DescribeLinks: (Operation.DESCRIBE, Operation.ADMIN),
}
# Hub to hub only (PUBLISH: a queue's owner publishing its dead letters, whose permission it
# checked itself: ``hedwig.hub.spreading.dead_letters``).
INTERNAL_SERVES = frozenset(
    (*STORAGE_REQUESTS, TopicStats, Ping, TailTopic, DeliveryStats, Publish)
)
# A connection's cached decisions are dropped past this many (a client touching many topics).
DECISION_CACHE_SIZE = 4096


class ListenerRole(Enum):
    CLIENT = "client"
    INTERNAL = "internal"


class Caller(Protocol):
    """What access control keeps on a connection (``hedwig.hub.front.server.ClientConnection``)."""

    name: str
    role: ListenerRole
    principal: Principal
    decisions: dict[tuple[Operation, str], bool]
    acl_generation: int
    audit: AuditBudget


class AccessControl:
    def __init__(
        self,
        *,
        authenticate: bool,
        authorize: bool,
        internal_plane: bool,
        verifier: TokenVerifier,
        super_users: frozenset[str],
        events: HubEvents,
        clock: Clock,
    ) -> None:
        self.authenticate = authenticate
        self.authorize = authorize
        self.internal_plane = internal_plane
        self.verifier = verifier
        self.super_users = super_users
        self.acls = AclSet(super_users=super_users)
        self.generation = 0
        self._events = events
        self._clock = clock

    # admission ------------------------------------------------------------------------------

    def admit(self, conn: Caller, frame: Request, op: str) -> None:
        """Raise the refusal for ``frame`` on ``conn`` (``op`` is its metric label), if any."""
        ftype = type(frame)
        if conn.role is ListenerRole.INTERNAL:
            if ftype not in INTERNAL_SERVES:
                self._deny(
                    conn,
                    op,
                    DenialReason.FORBIDDEN,
                    ForbiddenError(f"{op} is not served on the internal listener"),
                )
            return
        if ftype in STORAGE_REQUESTS:
            if self.internal_plane or self.authenticate:
                self._deny(
                    conn,
                    op,
                    DenialReason.INTERNAL_ONLY,
                    InternalOnlyError(
                        f"{op} is a hub-to-hub request, served only on the hubs' internal listener",
                        principal=conn.principal.name,
                        operation=op,
                    ),
                )
            return
        if ftype is Authenticate or not self.authenticate:
            return
        principal = conn.principal
        if principal.anonymous:
            self._deny(
                conn,
                op,
                DenialReason.UNAUTHENTICATED,
                AuthenticationError(
                    f"{op} refused: this hub needs an identity (a client certificate, or a "
                    "token with AUTHENTICATE) first",
                    reason="unauthenticated",
                ),
            )
        if self.expired(conn):
            self._deny(
                conn,
                op,
                DenialReason.EXPIRED,
                AuthenticationError(
                    f"the credentials of {principal.name} have expired; authenticate again",
                    reason="expired",
                ),
            )
        if not self.authorize:
            return
        if ftype in SUPER_USERS_ONLY:
            if principal.name not in self.super_users:
                self._deny(
                    conn,
                    op,
                    DenialReason.FORBIDDEN,
                    ForbiddenError(
                        f"principal {cut(principal.name)} may not {op}: it moves every tenant's "
                        "topics of a bundle, which only the region's super-users may",
                        principal=principal.name,
                        operation=op,
                    ),
                )
            return
        cluster = _NEEDS_CLUSTER.get(ftype)
        if cluster is not None:
            if not any(self.acls.allows(principal.name, o, None) for o in cluster):
                self._deny(
                    conn,
                    op,
                    DenialReason.FORBIDDEN,
                    ForbiddenError(
                        f"principal {cut(principal.name)} may not {op}: it needs "
                        f"{cluster[0].value} or {cluster[1].value} on the cluster",
                        principal=principal.name,
                        operation=cluster[0].value,
                        topic="",
                    ),
                )
            return
        need = _NEEDS.get(ftype)
        if need is None:
            anyof = _NEEDS_ANY.get(ftype)
            if anyof is None:
                return
            topic_ = frame.topic  # type: ignore[union-attr]
            if not any(self.allowed(conn, o, topic_) for o in anyof):
                self._deny(
                    conn,
                    op,
                    DenialReason.FORBIDDEN,
                    self._forbidden(conn, anyof[0], topic_),
                    topic=topic_,
                )
            return
        topic: str = frame.topic  # type: ignore[union-attr]
        if not self.allowed(conn, need, topic):
            self._deny(
                conn, op, DenialReason.FORBIDDEN, self._forbidden(conn, need, topic), topic=topic
            )

    def allowed(self, conn: Caller, op: Operation, topic: str) -> bool:
        """Whether ``conn`` may do ``op`` on ``topic`` now (cached until the rules change)."""
        if conn.role is ListenerRole.INTERNAL or not self.authorize:
            return True
        if conn.acl_generation != self.generation:
            conn.decisions.clear()
            conn.acl_generation = self.generation
        key = (op, topic)
        got = conn.decisions.get(key)
        if got is None:
            if len(conn.decisions) >= DECISION_CACHE_SIZE:
                conn.decisions.clear()
            # A lane is its topic's: the topic's rules cover it (``hedwig.metadata.plans``).
            got = conn.decisions[key] = self.acls.allows(conn.principal.name, op, lane_of(topic)[0])
        return got

    def permits(self, principal: str | None, op: Operation, topic: str) -> bool:
        """Whether ``principal`` may do ``op`` on ``topic`` by the rules now, for a hub acting
        on its behalf (a queue's dead letters for its creator; None: nobody, refused)."""
        if not self.authorize:
            return True
        return principal is not None and self.acls.allows(principal, op, lane_of(topic)[0])

    async def check_create(
        self, conn: Caller, topic: str, exists: Callable[[], Awaitable[bool]]
    ) -> None:
        """A request for a topic this hub does not serve may create it: it needs ``create``
        unless the topic exists already."""
        if self.allowed(conn, Operation.CREATE, topic) or await exists():
            return
        self._deny(
            conn,
            "create",
            DenialReason.FORBIDDEN,
            self._forbidden(conn, Operation.CREATE, topic),
            topic=topic,
        )

    def expired(self, conn: Caller) -> bool:
        """Whether ``conn``'s credentials expired (past the leeway) without being renewed."""
        expires = conn.principal.expires_ms
        return bool(expires) and self._clock.wall_ms() > expires + LEEWAY_S * 1000

    def close_expired(self, connections: Iterable[Caller], close: Callable[[Caller], None]) -> int:
        """Close the connections whose credentials expired: a subscriber would otherwise go on
        receiving deliveries it may no longer be entitled to. A client that still holds valid
        credentials connects and authenticates again at once."""
        closed = 0
        for conn in list(connections):
            if self.expired(conn):
                self._events.denied("connect", DenialReason.EXPIRED)
                audit.write(
                    conn,
                    logging.WARNING,
                    {
                        "event": "closed",
                        "reason": "expired",
                        "principal": cut(conn.principal.name),
                        "peer": conn.name,
                    },
                )
                close(conn)
                closed += 1
        return closed

    def cluster_admin(self, principal: Principal) -> bool:
        """Whether ``principal`` may drain hubs and rebalance (``admin`` on the cluster)."""
        if not self.authorize:
            return not (self.authenticate and principal.anonymous)
        return self.acls.allows(principal.name, Operation.ADMIN, None)

    # authentication --------------------------------------------------------------------------

    async def authenticate_with(self, conn: Caller, frame: Authenticate) -> Authenticated:
        """Serve AUTHENTICATE: check the token, and the connection acts as its principal."""
        if frame.mechanism != TOKEN:
            self._deny(
                conn,
                "authenticate",
                DenialReason.MECHANISM,
                AuthenticationError(
                    f"unknown authentication mechanism {frame.mechanism!r}", reason="mechanism"
                ),
            )
        if not self.verifier:
            if not self.authenticate:
                # Security is off: credentials are not needed, and not checked.
                return Authenticated(request_id=frame.request_id, principal=ANONYMOUS.name)
            self._deny(
                conn,
                "authenticate",
                DenialReason.ISSUER,
                AuthenticationError("this hub accepts no tokens", reason="issuer"),
            )
        try:
            principal = await self.verifier.verify(frame.credentials)
        except AuthenticationError as exc:
            self._deny(conn, "authenticate", DenialReason.of(exc.reason), exc)
            raise  # pragma: no cover - _deny raises
        if not conn.principal.anonymous and conn.principal.name != principal.name:
            self._deny(
                conn,
                "authenticate",
                DenialReason.PRINCIPAL_CHANGED,
                AuthenticationError(
                    f"a connection authenticated as {conn.principal.name} cannot become "
                    f"{principal.name}",
                    reason="principal_changed",
                ),
            )
        conn.principal = principal
        conn.decisions.clear()
        audit.write(
            conn,
            logging.INFO,
            {"event": "authenticated", "principal": cut(principal.name), "peer": conn.name},
        )
        return Authenticated(
            request_id=frame.request_id,
            principal=principal.name,
            expires_ms=principal.expires_ms,
        )

    # rules -------------------------------------------------------------------------------------

    def set_acls(self, acls: AclSet) -> None:
        """New rules: every cached decision is forgotten (the caller revokes subscriptions)."""
        self.acls = acls
        self.generation += 1

    # refusals ----------------------------------------------------------------------------------

    def refuse(self, conn: Caller, op: str, exc: ForbiddenError, *, topic: str = "") -> None:
        """Raise ``exc``, a refusal decided elsewhere (``hedwig.hub.front.owners``), counted
        and audited as this module's own are."""
        self._deny(conn, op, DenialReason.FORBIDDEN, exc, topic=topic)

    def _forbidden(self, conn: Caller, op: Operation, topic: str) -> ForbiddenError:
        return ForbiddenError(
            f"principal {cut(conn.principal.name)} may not {op.value} topic {cut(topic)!r}",
            principal=conn.principal.name,
            operation=op.value,
            topic=topic,
        )

    def _deny(
        self, conn: Caller, op: str, reason: DenialReason, exc: HedwigError, *, topic: str = ""
    ) -> None:
        self._events.denied(op, reason)
        audit.write(
            conn,
            logging.WARNING,
            {
                "event": "denied",
                "op": op,
                "reason": reason.value,
                "principal": cut(conn.principal.name),
                "topic": cut(topic),
                "peer": conn.name,
                "listener": conn.role.value,
                "message": cut(str(exc), MESSAGE_CHARS),
            },
        )
        raise exc
