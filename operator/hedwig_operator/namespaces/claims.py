"""Which HedwigNamespace manages which namespace of a pool: its claim, and the claims' winner.

One resource manages one namespace's policy. When several claim the same namespace of a pool,
the oldest (creation time, then name) manages it; the others are refused (ResourceConflict)
and never touch the policy, not even when they are deleted (as Topics, ``topics.claims``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hedwig_operator.specs import SpecError, parse_namespace


@dataclass(frozen=True, slots=True)
class NamespaceClaim:
    """A HedwigNamespace's claim on a namespace of a pool (the value of the claims index)."""

    namespace: str
    name: str
    pool: str
    namespace_name: str
    creation_timestamp: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.pool, self.namespace_name)

    @property
    def order(self) -> tuple[str, str]:
        # RFC 3339 timestamps in UTC sort as strings; the name breaks ties within a second.
        return (self.creation_timestamp, self.name)


def claim_of(body: Mapping[str, Any]) -> NamespaceClaim | None:
    """The claim a HedwigNamespace makes, or None if its spec cannot claim anything."""
    try:
        spec = parse_namespace(body)
    except SpecError:
        return None
    return NamespaceClaim(
        spec.namespace, spec.name, spec.pool, spec.namespace_name, spec.creation_timestamp
    )


def conflict_winner(claims: Iterable[NamespaceClaim], namespace_name: str) -> NamespaceClaim | None:
    """The HedwigNamespace that manages ``namespace_name``: the oldest claim."""
    rivals = [c for c in claims if c.namespace_name == namespace_name]
    return min(rivals, key=lambda c: c.order) if rivals else None
