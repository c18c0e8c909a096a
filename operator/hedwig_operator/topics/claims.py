"""Which Topic resource manages which topic of a pool: its claim, and the claims' winner.

One Topic resource manages one topic of a pool. When several claim the same topic name, the
oldest (creation time, then name) manages it; the others are refused (ResourceConflict) and
never touch the topic, not even when they are deleted. Claims are indexed by pool
(``claims_key``), so a Topic's reconciliation sees its rivals without listing every Topic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hedwig.errors import InvalidTopicError
from hedwig.protocol.names import validate_name
from hedwig_operator.kube import ObjectRef
from hedwig_operator.resources import API_VERSION, POOL_KIND
from hedwig_operator.specs import ScalingMode, SpecError, parse_topic


@dataclass(frozen=True, slots=True)
class TopicClaim:
    """A Topic resource's claim on a topic name of a pool (the value of the claims index)."""

    namespace: str
    name: str
    pool: str
    topic_name: str
    creation_timestamp: str
    uid: str = ""
    # ``spec.scaling``: the pool's scaling policy changes the plan only under ``auto``.
    scaling: ScalingMode = ScalingMode.AUTO
    max_hubs: int | None = None

    @property
    def order(self) -> tuple[str, str]:
        # RFC 3339 timestamps in UTC sort as strings; the name breaks ties within a second.
        return (self.creation_timestamp, self.name)


def claim_of(body: Mapping[str, Any]) -> TopicClaim | None:
    """The claim a Topic makes, or None if its spec cannot claim anything."""
    try:
        spec = parse_topic(body)
        validate_name(spec.topic_name)
    except (SpecError, InvalidTopicError):
        return None
    return TopicClaim(
        spec.namespace,
        spec.name,
        spec.pool,
        spec.topic_name,
        spec.creation_timestamp,
        spec.uid,
        scaling=spec.scaling_mode,
        max_hubs=spec.max_hubs,
    )


def claims_key(namespace: str, pool: str) -> tuple[str, str]:
    return (namespace, pool)


def conflict_winner(claims: Iterable[TopicClaim], topic_name: str) -> TopicClaim | None:
    """The Topic resource that manages ``topic_name``: the oldest claim."""
    rivals = [c for c in claims if c.topic_name == topic_name]
    return min(rivals, key=lambda c: c.order) if rivals else None


def pool_ref(namespace: str, pool: str) -> ObjectRef:
    """The HubPool a Topic's claim is on."""
    return ObjectRef(API_VERSION, POOL_KIND, namespace, pool)
