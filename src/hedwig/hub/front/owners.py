"""Subscriptions as their creators' property: who may attach to, reset, delete and list one.

``subscribe`` on a topic lets a principal make subscriptions of that topic; a subscription
it made is its own (the owner is recorded with it: ``SubscriptionData.owner``), and another
principal with ``subscribe`` on the topic may not touch it. A second principal once
force-attached a first one's subscription, consumed it to the end (the messages were lost to
their owner), reset it and deleted it, with the names from DESCRIBE_TOPIC. The rules, with
authorization on:

- attaching to a subscription that exists (SUBSCRIBE, force-attach included), resetting it
  (RESET_SUBSCRIPTION) and deleting it (UNSUBSCRIBE) need its owner, or ``admin`` on the
  topic (an operator's override); anyone else is FORBIDDEN, as for a missing permission;
- consuming and closing act on the connection's own attachment (``TopicSubscriptions``
  serves them only to the connection attached), which only the rule above lets one have;
- DESCRIBE_TOPIC lists the caller's own subscriptions only, and all of them with ``admin``;
- a subscription with a dead-letter topic needs its creator's ``publish`` on that topic;
- a subscription with no owner recorded (made before owners were, or by an anonymous
  connection with security off) stays what it was: anyone's with ``subscribe``.

With authorization off nothing is checked and nothing read. The check is made by the request
handlers once the hub that serves the subscription is known (``hedwig.hub.requests``), one
read of the subscription's record, as attaching itself makes. An attach that found no
subscription may have created it or met one made a moment earlier by someone else; which, the
record read again after it says, and the second case is detached and refused.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import replace

from hedwig.errors import ForbiddenError
from hedwig.hub.front.access import AccessControl, Caller
from hedwig.metadata.acls import Operation
from hedwig.metadata.managers import MetadataStore
from hedwig.protocol import QueueInfo, TopicDescription
from hedwig.security.principal import Principal


def owner_of(principal: Principal) -> str | None:
    """The owner a subscription ``principal`` creates is recorded with (None: anonymous)."""
    return None if principal.anonymous else principal.name


class SubscriptionOwners:
    def __init__(self, *, access: AccessControl, store: MetadataStore) -> None:
        self._access = access
        self._store = store

    async def check(self, conn: Caller, op: str, topic: str, subscriber: str) -> bool:
        """Refuse ``op`` on ``subscriber`` of ``topic`` unless ``conn`` may use it; whether
        the subscription exists."""
        if not self._access.authorize:
            return True
        got = await self._store.subscriptions.read_subscription_data(topic, subscriber)
        if got is None:
            return False
        self.refuse_unless_owner(conn, op, topic, subscriber, got.value.owner)
        return True

    def refuse_unless_owner(
        self, conn: Caller, op: str, topic: str, subscriber: str, owner: str | None
    ) -> None:
        if self.may_use(conn, topic, owner):
            return
        self._access.refuse(
            conn,
            op,
            ForbiddenError(
                f"subscription {subscriber!r} of topic {topic!r} belongs to another principal "
                f"({conn.principal.name} may not {op} it without admin on the topic)",
                principal=conn.principal.name,
                operation=op,
                topic=topic,
            ),
            topic=topic,
        )

    async def check_attached(
        self, conn: Caller, topic: str, subscriber: str, detach: Callable[[], Awaitable[None]]
    ) -> None:
        """After an attach that found no subscription: refuse it, ``detach`` first, unless
        the subscription attached to is ``conn``'s (it made it) rather than one someone else
        made meanwhile."""
        if not self._access.authorize:
            return
        got = await self._store.subscriptions.read_subscription_data(topic, subscriber)
        owner = None if got is None else got.value.owner
        if not self.may_use(conn, topic, owner):
            await detach()
            self.refuse_unless_owner(conn, "subscribe", topic, subscriber, owner)

    def check_dead_letter(self, conn: Caller, topic: str, dead_letter: str) -> None:
        """Refuse a subscription of ``topic`` whose dead letters would go to a topic ``conn``
        may not publish to: the owner publishes them for its creator (checked again per
        letter against the rules then, ``hedwig.hub.spreading.dead_letters``)."""
        if self._access.allowed(conn, Operation.PUBLISH, dead_letter):
            return
        self._access.refuse(
            conn,
            "create_subscription",
            ForbiddenError(
                f"principal {conn.principal.name} may not publish to {dead_letter!r}, so may not "
                f"make it the dead-letter topic of a subscription of {topic!r}",
                principal=conn.principal.name,
                operation=Operation.PUBLISH.value,
                topic=dead_letter,
            ),
            topic=dead_letter,
        )

    def may_use(self, conn: Caller, topic: str, owner: str | None) -> bool:
        if not self._access.authorize or owner is None or owner == conn.principal.name:
            return True
        return self._access.allowed(conn, Operation.ADMIN, topic)

    async def visible(self, conn: Caller, topic: str, answer: TopicDescription) -> TopicDescription:
        """``answer`` with only the subscriptions ``conn`` may use listed."""
        usable = await self._usable(conn, topic)
        if usable is None:
            return answer
        kept = tuple(info for info in answer.subscriptions if info.name in usable)
        return replace(answer, subscriptions=kept)

    async def visible_queues(
        self, conn: Caller, topic: str, queues: tuple[QueueInfo, ...]
    ) -> tuple[QueueInfo, ...]:
        """``queues`` (DESCRIBE_QUEUES) with only the subscriptions ``conn`` may use listed,
        as DESCRIBE_TOPIC lists them: names are what an attack on a subscription aims at."""
        usable = await self._usable(conn, topic)
        return queues if usable is None else tuple(q for q in queues if q.name in usable)

    async def _usable(self, conn: Caller, topic: str) -> frozenset[str] | None:
        """The subscriptions of ``topic`` that ``conn`` may use (its own, and those with no
        owner recorded); ``None``: all of them (no authorization, or ``admin`` on it)."""
        if not self._access.authorize or self._access.allowed(conn, Operation.ADMIN, topic):
            return None
        stored = await self._store.subscriptions.read_subscriptions(topic)
        mine = conn.principal.name
        return frozenset(n for n, s in stored.items() if s.value.owner in (None, mine))
