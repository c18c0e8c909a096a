"""Requests the operator sends to hubs through the client library.

Three:

- ``activate``: a TopicStats request for a topic nobody owns, which makes a hub claim it (by
  its placement policy) and recover its log. The operator does this so that a Topic resource
  is Ready with an owner, and a topic whose owner died gets a new one without waiting for a
  client to ask.
- ``release``: ask the owner to hand a topic over gracefully (``HedwigClient.move_topic``):
  it stops, flushes, closes its ledger, releases its owner record and tells its clients where
  the topic went. Hubs that do not support it answer with an error; the caller then falls
  back to deleting the owner znode, which is always safe (ledger fencing).
- ``delete``: ask the topic's owner to delete it (``HedwigClient.delete_topic`` with force): it
  closes the topic, deletes every replica of its ledgers, then its records. The caller falls
  back to deleting the records itself when no hub can do it (the hubs' audits then collect the
  orphaned replicas).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from hedwig.client import HedwigClient
from hedwig.errors import HedwigError, NoSuchTopicError
from hedwig.protocol import MoveKind
from hedwig.security import ClientSecurity
from hedwig_operator.security import PoolTrust

log = logging.getLogger(__name__)


class HubRequests(Protocol):
    async def activate(self, addresses: Sequence[str], topic: str, timeout_s: float) -> None:
        """Make some hub own ``topic``; raises on failure or timeout."""
        ...

    async def release(
        self,
        owner: str,
        topic: str,
        destination: str | None,
        reason: str,
        timeout_s: float,
        kind: MoveKind = MoveKind.REQUESTED,
    ) -> str | None:
        """Ask ``owner`` to hand ``topic`` over; None if it did, else why not."""
        ...

    async def delete(self, addresses: Sequence[str], topic: str, timeout_s: float) -> str | None:
        """Have the topic's owner delete it; None if it did, else why not."""
        ...


class ClientHubRequests:
    """``HubRequests`` through short-lived ``HedwigClient`` instances (requests are rare: a
    topic without owner, a move). A secured pool's hubs are reached with TLS (its hub CA) and
    the operator's token, from ``trust``."""

    def __init__(self, trust: PoolTrust | None = None) -> None:
        self.trust = trust or PoolTrust()

    def _security(self, addresses: Sequence[str]) -> ClientSecurity | None:
        return self.trust.security_for(addresses[0]) if addresses else None

    async def activate(self, addresses: Sequence[str], topic: str, timeout_s: float) -> None:
        async with HedwigClient(
            list(addresses), request_timeout_s=timeout_s, security=self._security(addresses)
        ) as client:
            await asyncio.wait_for(client.topic_info(topic), timeout_s)

    async def release(
        self,
        owner: str,
        topic: str,
        destination: str | None,
        reason: str,
        timeout_s: float,
        kind: MoveKind = MoveKind.REQUESTED,
    ) -> str | None:
        async with HedwigClient(
            [owner], request_timeout_s=timeout_s, security=self._security([owner])
        ) as client:
            try:
                await asyncio.wait_for(
                    client.move_topic(topic, to=destination, reason=reason, kind=kind), timeout_s
                )
            except TimeoutError:
                return f"no hand-off within {timeout_s:.0f}s"
            except HedwigError as exc:
                return f"the hub refused the hand-off: {exc}"
        return None

    async def delete(self, addresses: Sequence[str], topic: str, timeout_s: float) -> str | None:
        async with HedwigClient(
            list(addresses), request_timeout_s=timeout_s, security=self._security(addresses)
        ) as client:
            try:
                await asyncio.wait_for(client.delete_topic(topic, force=True), timeout_s)
            except NoSuchTopicError:
                return None  # already gone
            except TimeoutError:
                return f"no hub deleted it within {timeout_s:.0f}s"
            except HedwigError as exc:
                return f"the hubs could not delete it: {exc}"
        return None
