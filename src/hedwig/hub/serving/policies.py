"""A delivery policy as CREATE_SUBSCRIPTION asks for it, checked where the owner takes it:
a policy that cannot be applied is INVALID_REQUEST (not retried), and so is what this hub
does not serve yet (dead-letter topics, delays), rather than a
subscription created whose policy would be silently ignored."""

from __future__ import annotations

from hedwig.errors import InvalidRequestError, UsageError
from hedwig.metadata.records import DeliveryPolicy, SubscriptionType
from hedwig.protocol import CreateSubscription


def check_served(kind: SubscriptionType) -> None:
    """Every type is served now; kept as the one place a type a hub cannot serve is refused."""


def policy_of(req: CreateSubscription) -> DeliveryPolicy:
    check_served(req.type)
    if req.dead_letter is not None:
        raise InvalidRequestError("dead-letter topics are not served by this hub yet")
    if req.delay_ms:
        raise InvalidRequestError("delayed delivery is not served by this hub yet")
    try:
        return DeliveryPolicy(
            req.type,
            ack_timeout_ms=req.ack_timeout_ms,
            max_deliveries=req.max_deliveries,
            backoff_ms=tuple(step.ms for step in req.backoff),
        )
    except UsageError as exc:
        raise InvalidRequestError(f"subscription {req.subscriber!r}: {exc}") from exc
