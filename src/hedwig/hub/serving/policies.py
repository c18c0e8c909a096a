"""A delivery policy as CREATE_SUBSCRIPTION asks for it, checked where the owner takes it:
a policy that cannot be applied is INVALID_REQUEST (not retried), rather than a subscription
created whose policy would be silently ignored (a delay of more than a week is refused where
the policy is built: ``DeliveryPolicy``).

A dead-letter topic is a normal topic that exists when the subscription is made (a name
mistyped would otherwise create a topic nobody reads), is not the subscription's own topic
or one of its lanes (a dead letter would come back to the subscription that gave up on it),
and is checked for its creator's ``publish`` permission by the request handler
(``hedwig.hub.requests.subscriptions``) before the owner is asked.
"""

from __future__ import annotations

from hedwig.errors import InvalidRequestError, InvalidTopicError, UsageError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import DeliveryPolicy, SubscriptionType
from hedwig.protocol import CreateSubscription, validate_name
from hedwig.protocol.names import lane_of


def check_served(kind: SubscriptionType) -> None:
    """Every type is served now; kept as the one place a type a hub cannot serve is refused."""


def check_dead_letter(topic: str, dead_letter: str) -> None:
    """``INVALID_REQUEST`` unless ``dead_letter`` may take the dead letters of ``topic``."""
    try:
        validate_name(dead_letter, what="dead-letter topic")
    except InvalidTopicError as exc:
        raise InvalidRequestError(str(exc)) from exc
    if lane_of(dead_letter)[0] == lane_of(topic)[0]:
        raise InvalidRequestError(
            f"the dead-letter topic of a subscription of {topic!r} must be another topic, "
            f"not {dead_letter!r}"
        )


async def policy_of(req: CreateSubscription, store: MetadataStore) -> DeliveryPolicy:
    check_served(req.type)
    if req.dead_letter is not None:
        check_dead_letter(req.topic, req.dead_letter)
        if not await store.topics.topic_exists(req.dead_letter):
            raise InvalidRequestError(
                f"dead-letter topic {req.dead_letter!r} does not exist: create it first "
                "(a mistyped name would make a topic nobody reads)"
            )
    try:
        return DeliveryPolicy(
            req.type,
            ack_timeout_ms=req.ack_timeout_ms,
            max_deliveries=req.max_deliveries,
            backoff_ms=tuple(step.ms for step in req.backoff),
            dead_letter=req.dead_letter,
            delay_ms=req.delay_ms,
        )
    except UsageError as exc:
        raise InvalidRequestError(f"subscription {req.subscriber!r}: {exc}") from exc
