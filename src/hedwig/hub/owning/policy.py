"""How a hub claims and keeps what it owns: one seam between owning topic by topic and by bundle.

A hub owns topics one of two ways, chosen once when it is built (``BundleSettings.enabled``,
``POLICIES``) and never asked again: **topic by topic** (``hedwig.hub.owning.claims``:
``TopicClaims``), an owner record per topic, or **by bundle** (``hedwig.hub.owning.
bundle_claims``: ``BundleClaims``), an owner record per consistent-hash range of topics.
Everything that differs between the two is a method of the policy; the ownership
(``hedwig.hub.owning.ownership``), the request handlers and the hub's loops call the policy and
never ask which it is.

What the ownership tells the policy, at the moments it must:

- ``resolve``: a request for a topic not served here, answered by a redirect or a claim;
- ``claimed``: a topic taken over under the policy's claim (by topic: its record watched);
- ``cannot_store``: a topic lost because its log failed here (by topic: its record given up,
  so other hubs claim it without waiting for this hub's session to end);
- ``released``: a topic handed over or let go (by topic: its record deleted);
- ``session_ended``: every record went with the session (by bundle: every bundle forgotten);
- ``stopped``: the hub stops, every topic let go (by bundle: the bundles' records deleted);
- ``hand_over``: a bundle handed to a named hub (topic by topic: owns none, so ``False``);
- ``region_map``: the bundle map and its owners, told to clients (topic by topic: none).

And what it says of itself: ``by_bundle`` (what the hub's alive record says, so that hubs of
the other kind refuse claims) and ``unloads_idle`` (whether an idle topic may be let go, to be
loaded again by its next request: only by bundle, where the next request finds it here).
"""

from __future__ import annotations

from typing import Protocol

from hedwig.hub.owning.bundle_claims import BundleClaims
from hedwig.hub.owning.claims import ClaimParts, TopicClaims
from hedwig.hub.owning.topic import OwnedTopic
from hedwig.metadata.bundles import Bundle
from hedwig.metadata.records import Version


class ClaimPolicy(Protocol):
    @property
    def by_bundle(self) -> bool: ...

    @property
    def unloads_idle(self) -> bool: ...

    async def resolve(self, topic: str, redirected: bool, create: bool) -> OwnedTopic: ...

    def claimed(self, topic: str, version: Version) -> None: ...

    def cannot_store(self, topic: str, version: Version | None) -> None: ...

    async def released(self, topic: str, version: Version | None) -> None: ...

    def session_ended(self) -> None: ...

    async def stopped(self) -> None: ...

    async def hand_over(self, bundle: Bundle, destination: str, reason: str) -> bool: ...

    async def region_map(self) -> tuple[tuple[int, ...], tuple[str, ...]]: ...


# Whether bundles are on -> the policy made.
POLICIES: dict[bool, type[TopicClaims] | type[BundleClaims]] = {
    False: TopicClaims,
    True: BundleClaims,
}


def claim_policy(parts: ClaimParts) -> ClaimPolicy:
    """The claim policy of a hub made of ``parts``, by its bundle settings."""
    return POLICIES[parts.settings.enabled](parts)
