"""Metric lookup: a subscription's backlog and oldest unacknowledged age, from its owner.

Rules:

- The metric names are fixed (``METRICS``); the label selector must name exactly one topic and
  one subscription with equality terms (``topic=T,subscription=S``, ``==`` accepted); any
  other term, operator or label is refused (``SelectorError``), so a typo never reads 0.
- ``hedwig_subscription_backlog`` is ``last_seq - consumed_seq`` as the owner describes the
  topic: the messages past the subscription's mark, delivered-but-unacknowledged ones
  included (a consumer that holds messages still needs the capacity).
- ``hedwig_subscription_oldest_unacked_seconds`` is the age the owner reports since the oldest
  unacknowledged message was first delivered (0 when none is, or when the owner does not
  serve the subscription at the moment): the hub does not keep publish times per message.
- An unknown topic or subscription is ``NotFoundError``, and so is, on a secured pool, a
  subscription another principal made when the API's user has ``describe`` but not ``admin``
  on the topic (the hub lists it only to its creator and to admins); the hubs out of reach
  is ``UnavailableError``: the API answers 404 and 503, and the autoscaler keeps its
  replicas.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from hedwig.client import HedwigClient
from hedwig.errors import HedwigError, NoSuchTopicError
from hedwig.security import ClientSecurity

BACKLOG = "hedwig_subscription_backlog"
OLDEST_UNACKED = "hedwig_subscription_oldest_unacked_seconds"
METRICS = (BACKLOG, OLDEST_UNACKED)
LABELS = ("topic", "subscription")


class LookupError_(Exception):
    """Base of the lookup's refusals (kept apart from the builtin ``LookupError``)."""


class SelectorError(LookupError_):
    """The label selector does not name one topic and one subscription."""


class NotFoundError(LookupError_):
    """No such metric, topic or subscription."""


class UnavailableError(LookupError_):
    """The hubs could not answer."""


@dataclass(frozen=True, slots=True)
class Selection:
    topic: str
    subscription: str


def parse_selector(selector: str) -> Selection:
    """``topic=T,subscription=S`` (any order, ``==`` too) into a ``Selection``."""
    found: dict[str, str] = {}
    for term in (t.strip() for t in selector.split(",")):
        if not term:
            continue
        key, sep, value = term.partition("==") if "==" in term else term.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or key.endswith("!") or key not in LABELS or not value or key in found:
            raise SelectorError(f"labelSelector term {term!r}: use topic=NAME,subscription=NAME")
        found[key] = value
    missing = [k for k in LABELS if k not in found]
    if missing:
        raise SelectorError(f"labelSelector lacks {', '.join(missing)}")
    return Selection(found["topic"], found["subscription"])


class HubLookup:
    """Reads the metrics from the topic's owner with a ``HedwigClient`` kept open."""

    def __init__(
        self,
        addresses: Sequence[str],
        *,
        security: ClientSecurity | None = None,
        timeout_s: float = 5.0,
    ) -> None:
        self._addresses = list(addresses)
        self._security = security
        self._timeout_s = timeout_s
        self._client: HedwigClient | None = None

    async def _connected(self) -> HedwigClient:
        if self._client is None:
            client = HedwigClient(
                self._addresses, request_timeout_s=self._timeout_s, security=self._security
            )
            await client.__aenter__()
            self._client = client
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.__aexit__(None, None, None)

    async def value(self, metric: str, selection: Selection) -> float:
        if metric not in METRICS:
            raise NotFoundError(f"no metric {metric!r}; served: {', '.join(METRICS)}")
        try:
            client = await self._connected()
            async with asyncio.timeout(self._timeout_s):
                if metric == BACKLOG:
                    return await self._backlog(client, selection)
                return await self._oldest(client, selection)
        except NoSuchTopicError as e:
            raise NotFoundError(f"no topic {selection.topic!r}") from e
        except (HedwigError, TimeoutError, OSError) as e:
            raise UnavailableError(f"hubs did not answer: {e}") from e

    async def _backlog(self, client: HedwigClient, selection: Selection) -> float:
        described = await client.describe_topic(selection.topic)
        for sub in described.subscriptions:
            if sub.name == selection.subscription:
                return float(max(0, described.last_seq - sub.consumed_seq))
        # A secured hub lists to ``describe`` alone only the caller's own subscriptions.
        raise NotFoundError(
            f"no subscription {selection.subscription!r} on {selection.topic!r} (on a secured "
            "pool: or not one this API's user made, without admin on the topic)"
        )

    async def _oldest(self, client: HedwigClient, selection: Selection) -> float:
        for queue in await client.describe_queues(selection.topic):
            if queue.name == selection.subscription:
                return queue.oldest_unacked_ms / 1000.0
        raise NotFoundError(f"no subscription {selection.subscription!r} on {selection.topic!r}")
