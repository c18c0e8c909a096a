"""Region links and replication policies: which remote regions a hub reaches, and which of
them carry a topic.

A region's hubs are configured with one link per other region: the remote region's name and
its hubs' client endpoints (any one of them will do; the client library follows redirects to
the topic's owner there); for a secured remote region the hub's ``replication`` settings name
the CA that signed its hubs' certificates and this hub's credentials there. Links are
all-to-all, as in the original Hedwig: no transit regions.

A topic's replication policy names the regions that carry it; ``None`` (the default) means
every linked region. The hub owning a topic replicates it from each region the policy and the
links both name; the local region is never one of them.

Links are written as one setting, ``NAME=HOST:PORT[,HOST:PORT...]`` per region, separated by
``;`` (``parse_links``), so a link is one environment variable on a container. The link and
its parsing are the hub's ``replication`` settings' (``hedwig.settings.replication``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hedwig.settings.replication import RegionLink, parse_links

__all__ = ["RegionLink", "ReplicationPolicy", "carrying_regions", "parse_links"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationPolicy:
    """Which regions carry a topic: ``None`` every linked region, else the regions named."""

    regions: frozenset[str] | None = None


def carrying_regions(
    links: Iterable[RegionLink], policy: ReplicationPolicy
) -> tuple[RegionLink, ...]:
    """The links a topic with ``policy`` is replicated over, in the links' order."""
    if policy.regions is None:
        return tuple(links)
    return tuple(link for link in links if link.region in policy.regions)
