"""What a hub's parts report as it happens, as one typed interface.

Owned topics, subscriptions, ownership and the request handlers tell ``HubEvents`` what
happened (a batch stored, messages delivered, a topic claimed, lost or handed over, a request
answered); ``hedwig.hub.reporting.metrics.HubMetrics`` implements it with Prometheus
metrics, and tests implement it to watch a hub. Nothing in the hub counts for the metrics
any other way.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from hedwig.hub.reporting.denials import DenialReason
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.metadata.managers import SessionState
from hedwig.protocol.kinds import MoveKind


class LossKind(Enum):
    """Why a hub lost a topic without handing it over; the value is the metric label."""

    # Someone else deleted or rewrote the owner record (an operator's forced move, a bug).
    OWNERSHIP_REMOVED = "ownership-removed"
    # The metadata session expired, or stayed unreachable for as long as a session lives.
    SESSION = "session"
    # The topic's log failed (a write lost its ack quorum, a ledger was fenced, a consume mark
    # was written by another hub): another hub may have taken over.
    LEDGER = "ledger"
    # The hub stopped before its hand-offs could complete.
    STOPPED = "stopped"


class HubEvents(Protocol):
    def published(self, topic: str, messages: int, size: int) -> None:
        """A batch of ``messages`` (``size`` payload bytes) was stored and acknowledged."""
        ...

    def publish_answered(self, seconds: float) -> None:
        """A publish request was answered, ``seconds`` after it arrived."""
        ...

    def delivered(self, topic: str, messages: int, size: int) -> None:
        """Messages were pushed to a subscriber."""
        ...

    def claimed(self, topic: str, ownerless_s: float | None) -> None:
        """This hub took the topic over; ``ownerless_s`` is how long nobody served it (from
        the previous owner's hand-off or its last message), if known."""
        ...

    def released(self, topic: str, kind: MoveKind) -> None:
        """This hub handed the topic over gracefully."""
        ...

    def recovered_in_bulk(self, topics: int) -> None:
        """``topics`` a won bundle's old owner left open were taken over in bulk, before any
        request asked for them (``hedwig.hub.owning.bundle_recovery``)."""
        ...

    def lost(self, topic: str, kind: LossKind) -> None:
        """This hub stopped serving the topic without a hand-off."""
        ...

    def owned_changed(self, count: int) -> None:
        """The number of topics this hub owns changed."""
        ...

    def deleted(self, topic: str, *, expired: bool) -> None:
        """This hub deleted the topic (asked to, or because it expired)."""
        ...

    def subscription_expired(self, topic: str, subscriber: str) -> None:
        """This hub deleted a subscription nobody used for its topic's expiry time."""
        ...

    def redirected(self, topic: str) -> None:
        """A request was answered with the address of another hub."""
        ...

    def answered(self, op: str, status: str) -> None:
        """A request of kind ``op`` was answered with ``status`` ("ok" or a status label)."""
        ...

    def session_changed(self, state: SessionState) -> None:
        """The metadata session changed state (``LOST``: it expired)."""
        ...

    def denied(self, op: str, reason: DenialReason) -> None:
        """A request (or a connection, op ``connect``) was refused by the trust boundary:
        ``reason`` is a bounded category (``hedwig.hub.reporting.denials.DenialReason``)."""
        ...

    def disconnected(self, reason: Disconnect) -> None:
        """The hub closed a connection itself, for ``reason``."""
        ...


class NoEvents:
    """Events nobody listens to (a hub part used on its own, in a test or a tool)."""

    def published(self, topic: str, messages: int, size: int) -> None:
        return None

    def publish_answered(self, seconds: float) -> None:
        return None

    def delivered(self, topic: str, messages: int, size: int) -> None:
        return None

    def claimed(self, topic: str, ownerless_s: float | None) -> None:
        return None

    def released(self, topic: str, kind: MoveKind) -> None:
        return None

    def recovered_in_bulk(self, topics: int) -> None:
        return None

    def lost(self, topic: str, kind: LossKind) -> None:
        return None

    def owned_changed(self, count: int) -> None:
        return None

    def deleted(self, topic: str, *, expired: bool) -> None:
        return None

    def subscription_expired(self, topic: str, subscriber: str) -> None:
        return None

    def redirected(self, topic: str) -> None:
        return None

    def answered(self, op: str, status: str) -> None:
        return None

    def session_changed(self, state: SessionState) -> None:
        return None

    def denied(self, op: str, reason: DenialReason) -> None:
        return None

    def disconnected(self, reason: Disconnect) -> None:
        return None
