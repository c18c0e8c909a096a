"""Which peers count as one when connections are counted per peer.

A hub bounds what connections that have not proved who they are may hold per peer address,
before their TLS handshake (``tls_listener``) and after it (``hedwig.hub.front.doorway``), and
both count by the same key: an IPv4 address as it is, an IPv4-mapped IPv6 address as its IPv4
address, any other IPv6 address by its /64, the block one host is given (an attacker with one
has 2**64 addresses to cycle through).
"""

from __future__ import annotations

import ipaddress


def peer_group(host: str) -> str:
    """The peer address connections are counted by: an IPv4 address, an IPv6 /64."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return host
