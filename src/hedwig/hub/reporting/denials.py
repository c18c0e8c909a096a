"""Why the trust boundary refused something, declared once.

A refusal is counted as ``hedwig_auth_denied_total{op, reason}``: ``reason`` is one of
``DenialReason`` (a bounded label, whatever a client sends), and ``DENIAL_SERIES`` lists the
pairs a refusal can have, created when the metrics are, so that the first refusal of each kind
is seen by ``increase()``. ``hedwig.hub.front.access`` makes the refusals.
"""

from __future__ import annotations

from enum import Enum


class DenialReason(str, Enum):
    UNAUTHENTICATED = "unauthenticated"
    EXPIRED = "expired"
    FORBIDDEN = "forbidden"
    INTERNAL_ONLY = "internal_only"
    # A token refused (``hedwig.security.tokens``), by what was wrong with it.
    AUDIENCE = "audience"
    ISSUER = "issuer"
    UNKNOWN_KEY = "unknown_key"
    SIGNATURE = "signature"
    MALFORMED = "malformed"
    MECHANISM = "mechanism"
    PRINCIPAL_CHANGED = "principal_changed"

    @classmethod
    def of(cls, reason: str | None) -> DenialReason:
        """The reason an ``AuthenticationError`` names (unauthenticated if none or unknown)."""
        try:
            return cls(reason)
        except ValueError:
            return cls.UNAUTHENTICATED


# The client requests a refusal can name (their frames' labels).
_CLIENT_OPS = (
    "publish",
    "subscribe",
    "consume",
    "unsubscribe",
    "close_subscription",
    "read",
    "delete_topic",
    "reset_subscription",
    "describe_topic",
    "tail_topic",
)
_STORAGE_OPS = (
    "add_entry",
    "read_entry",
    "read_lac",
    "fence_ledgers",
    "write_lacs",
    "delete_ledger",
)
_TOKEN_REASONS = (
    DenialReason.AUDIENCE,
    DenialReason.ISSUER,
    DenialReason.UNKNOWN_KEY,
    DenialReason.SIGNATURE,
    DenialReason.MALFORMED,
    DenialReason.EXPIRED,
    DenialReason.MECHANISM,
    DenialReason.PRINCIPAL_CHANGED,
)

DENIAL_SERIES: tuple[tuple[str, DenialReason], ...] = (
    *(
        (op, r)
        for op in (*_CLIENT_OPS, "topic_stats", "release_topic", "ping")
        for r in (DenialReason.UNAUTHENTICATED, DenialReason.EXPIRED)
    ),
    *(
        (op, DenialReason.FORBIDDEN)
        for op in (*_CLIENT_OPS, "topic_stats", "release_topic", "create")
    ),
    *((op, DenialReason.INTERNAL_ONLY) for op in _STORAGE_OPS),
    ("connect", DenialReason.EXPIRED),
    *(("authenticate", r) for r in _TOKEN_REASONS),
)
