"""The hub's replication settings: the regions this region is linked to, and how this hub
reaches them (``HubConfig.replication``; ``docs/operations.md``, "Linking regions").

A link per other region, all in one setting (``region_links``: ``NAME=HOST:PORT[,...]`` per
region, ``;`` between them, so a link is one environment variable on a container), each
naming the remote region's hubs' client endpoints: any one of them will do, the client
library follows redirects to the topic's owner there. A secured remote region is reached over
TLS, verified against ``region_link_ca``, with this hub's identity there: a client certificate
(``region_link_cert``/``region_link_key``, which may be the hub's own) or a token file. The
group parses the links when built, so a malformed one stops the hub at start
(``UsageError``); a link to the hub's own region is refused by ``HubConfig``.

``RegionLink`` and ``parse_links`` live here rather than in the hub
(``hedwig.hub.replicating.links`` uses them) because settings sit below the hub.
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.settings.declaration import setting


@dataclass(frozen=True, slots=True, kw_only=True)
class RegionLink:
    """How this region reaches another: its name, its hubs' client endpoints."""

    region: str
    endpoints: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.region or any(c in self.region for c in "=;,/@ "):
            raise UsageError(f"bad region name in a link: {self.region!r}")
        if not self.endpoints:
            raise UsageError(f"the link to region {self.region!r} names no endpoint")
        for e in self.endpoints:
            host, sep, port = e.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise UsageError(f"bad endpoint {e!r} in the link to region {self.region!r}")


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


@dataclass(frozen=True, slots=True)
class ReplicationSettings:
    # Off by default: a region is an island until it is linked.
    region_links: str = setting(
        "",
        "the linked regions, NAME=HOST:PORT[,HOST:PORT...] per region, ';' between them: "
        "every topic this hub owns is replicated from each (default: none)",
    )
    region_link_ca: str | None = setting(
        None, "CA of the linked regions' hubs' certificates (TLS to them when set)"
    )
    # A hub presents its own identity to the remote region (an ACL there allows it to
    # subscribe to the topics it replicates).
    region_link_cert: str | None = setting(
        None, "the certificate this hub presents to linked regions (its identity there)"
    )
    region_link_key: str | None = setting(None, "the private key of --region-link-cert")
    region_link_token_file: str | None = setting(
        None, "a token file this hub presents to linked regions instead of a certificate"
    )
    # The remote subscription's flow control: as a subscriber's default window.
    replication_window: int = setting(
        1000, "messages a linked region delivers to this hub's replicator ahead of its appends"
    )
    # A remote region out of reach is tried again, doubling up to this.
    replication_retry_max_s: float = setting(
        5.0, "seconds between tries at most while a linked region cannot be reached"
    )

    def __post_init__(self) -> None:
        parse_links(self.region_links, local_region="")
        if self.region_link_key and not self.region_link_cert:
            raise UsageError("--region-link-key needs --region-link-cert")
        if self.replication_window < 1 or self.replication_retry_max_s <= 0:
            raise UsageError("replication_window and replication_retry_max_s must be positive")

    def links(self, local_region: str) -> tuple[RegionLink, ...]:
        """The links, each to another region than ``local_region``."""
        return parse_links(self.region_links, local_region=local_region)
