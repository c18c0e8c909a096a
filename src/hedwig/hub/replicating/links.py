"""Region links and replication policies: which remote regions a hub reaches, and which of
them carry a topic.

A region's hubs are configured with one link per other region: the remote region's name and
its hubs' client endpoints (any one of them will do; the client library follows redirects to
the topic's owner there), and, for a secured remote region, the CA that signed its hubs'
certificates and this region's credentials for it. Links are all-to-all, as in the original
Hedwig: no transit regions.

A topic's replication policy names the regions that carry it; ``None`` (the default) means
every linked region. The hub owning a topic replicates it from each region the policy and the
links both name; the local region is never one of them.

Links are written as one setting, ``NAME=HOST:PORT[,HOST:PORT...]`` per region, separated by
``;`` (``parse_links``), so a link is one environment variable on a container.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hedwig.errors import UsageError


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionLink:
    """How this region reaches another: its name, its hubs' client endpoints, and for a
    secured region the CA file and credentials (a token file) to present."""

    region: str
    endpoints: tuple[str, ...]
    ca_file: str | None = None
    token_file: str | None = None

    def __post_init__(self) -> None:
        if not self.region or any(c in self.region for c in "=;,/ "):
            raise UsageError(f"bad region name in a link: {self.region!r}")
        if not self.endpoints:
            raise UsageError(f"the link to region {self.region!r} names no endpoint")
        for e in self.endpoints:
            host, sep, port = e.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise UsageError(f"bad endpoint {e!r} in the link to region {self.region!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicationPolicy:
    """Which regions carry a topic: ``None`` every linked region, else the regions named."""

    regions: frozenset[str] | None = None


def parse_links(text: str, *, local_region: str) -> tuple[RegionLink, ...]:
    """``NAME=HOST:PORT[,HOST:PORT...];...`` as links; a link to the local region is refused."""
    links: list[RegionLink] = []
    seen: set[str] = set()
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, sep, rest = part.partition("=")
        if not sep:
            raise UsageError(f"a region link is NAME=HOST:PORT[,...], not {part!r}")
        name = name.strip()
        if name == local_region:
            raise UsageError(f"region {name!r} cannot link to itself")
        if name in seen:
            raise UsageError(f"region {name!r} is linked twice")
        seen.add(name)
        endpoints = tuple(e.strip() for e in rest.split(",") if e.strip())
        links.append(RegionLink(region=name, endpoints=endpoints))
    return tuple(links)


def carrying_regions(
    links: Iterable[RegionLink], policy: ReplicationPolicy
) -> tuple[RegionLink, ...]:
    """The links a topic with ``policy`` is replicated over, in the links' order."""
    if policy.regions is None:
        return tuple(links)
    return tuple(link for link in links if link.region in policy.regions)
