"""The keys a client remembers hubs by: a topic's name, or one subscription of a topic.

A topic's requests go to its owner, which the router remembers under the topic's name. A
fan-out topic's subscriptions are served by delivery hubs of their own (``routing``), so each
subscription has a key of its own, ``SubscriptionRoute(topic, subscriber)``. It is a type, not
a string made of the two: a string key had to be taken apart again to learn whether it was a
subscription's and of which topic, and only the rule that no topic name holds a NUL kept the
two kinds apart. Being a tuple, a subscription's key never equals a topic's name, and its
topic is read as a field (the owner index forgets a moved topic's subscription routes by it).

The client files its subscribers under the same key: what hubs push about a subscription
(deliveries, forced closes, moves) names its topic and subscriber.

A named tuple rather than a frozen dataclass: it is hashed at every look-up of the router's
owner index and of the client's subscribers, and a tuple's hash is computed in C.
"""

from __future__ import annotations

from typing import NamedTuple, TypeAlias


class SubscriptionRoute(NamedTuple):
    """One subscription: the key its serving hub is remembered under, and its subscriber's."""

    topic: str
    subscriber: str


# What the router remembers a hub under: a topic's name, or one of its subscriptions.
RouteKey: TypeAlias = str | SubscriptionRoute
