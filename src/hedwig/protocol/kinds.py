"""Enumerations that travel on the wire as a ``u8``; values are never renumbered, only added.

They carry meaning that used to travel as prose and be matched by substring: why a topic was
handed over (``MoveKind``, for metrics and the client's logs) and why a hub closed a
subscription (``CloseReason``, which decides whether the client subscribes again).
"""

from __future__ import annotations

from enum import IntEnum

from hedwig.errors import UsageError


class SubscribeMode(IntEnum):
    CREATE = 0
    ATTACH = 1
    CREATE_OR_ATTACH = 2


class MoveKind(IntEnum):
    """Why a topic is handed over gracefully. The lower-case name is the metric label."""

    REQUESTED = 0  # by an operator or a user (``hedwig move``)
    OVERLOAD = 1  # rebalancing: the source hub carries more than the margin over the mean
    UNDERLOAD = 2  # rebalancing: an underloaded hub pulls work
    DRAIN = 3  # the hub is draining (preStop, ``hedwig drain``) or the policy empties it
    SHUTDOWN = 4  # the hub is stopping
    PERIODIC = 5  # the topic's ledger rolled over and the hub gives topics up then

    @property
    def label(self) -> str:
        return self.name.lower()


class CloseReason(IntEnum):
    """Why a hub closed a subscription on a connection (SUBSCRIPTION_FORCED_CLOSED)."""

    # Another connection attached the subscription with force-attach: the client stops, it
    # does not fight back.
    TAKEN_OVER = 0
    # The subscription was deleted (unsubscribed by another connection).
    UNSUBSCRIBED = 1
    # The hub could not go on delivering (its log broke); subscribing again finds the new owner.
    DELIVERY_FAILED = 2
    # The hub found it no longer owns the topic (another hub wrote the consume mark).
    OWNER_CHANGED = 3
    # The topic was deleted (with its subscriptions): stop.
    TOPIC_DELETED = 4
    # The subscription was reset to another position: attach again, delivery restarts there.
    RESET = 5
    # The connection's principal lost the permission to subscribe to the topic (an ACL was
    # removed, or its credentials expired): the client stops with FORBIDDEN.
    ACCESS_REVOKED = 6

    @property
    def resubscribe(self) -> bool:
        """Whether the client should attach again (elsewhere) rather than stop."""
        return self in (CloseReason.DELIVERY_FAILED, CloseReason.OWNER_CHANGED, CloseReason.RESET)


class ResetTo(IntEnum):
    """Where RESET_SUBSCRIPTION moves a subscription's consume mark."""

    SEQ = 0  # just before the given sequence id: delivery restarts at it
    EARLIEST = 1  # before the first message still kept
    LATEST = 2  # after the last message: only new messages are delivered
    TIME = 3  # before the first message published at or after ``seq``, a time (epoch ms)


class SubscriptionType(IntEnum):
    """How a subscription shares its messages among its consumers (chosen when it is
    created, kept in its record by ``label``): ``docs/architecture.md``, "Queues"."""

    EXCLUSIVE = 0  # one consumer, cumulative consumes
    FAILOVER = 1  # several attach; the first attached receives, the next takes over
    SHARED = 2  # each message to whichever consumer has room
    KEY_SHARED = 3  # one key's messages to one consumer while it is attached, in order

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", "-")

    @property
    def many(self) -> bool:
        """Several consumers may attach at once."""
        return self is not SubscriptionType.EXCLUSIVE

    @classmethod
    def parse(cls, text: str) -> SubscriptionType:
        """A type by its label (``key-shared``) or name (``KEY_SHARED``)."""
        wanted = text.strip().lower().replace("_", "-")
        for t in cls:
            if t.label == wanted:
                return t
        names = ", ".join(t.label for t in cls)
        raise UsageError(f"unknown subscription type {text!r} (one of {names})")
