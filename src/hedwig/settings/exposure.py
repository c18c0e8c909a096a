"""Which of a hub's listeners are open to its network: the rule behind ``--insecure``.

A listener is *open* when whoever reaches its port is served without proving who they are.
On the client listener (and the external one) that holds unless TLS and authentication are
both on: without them a connection is anonymous, and with the storage role on the client port
(no internal listener) it may read and delete any ledger. On the internal listener it holds
unless its TLS is set up (``internal_ca``/``_cert``/``_key``): only then must a peer present a
certificate of the region's hub CA.

An open listener on a loopback address is reachable from this machine alone (tests, ``hedwig
dev up``). Anywhere else it is *exposed*: ``hedwig hub`` refuses to start with an exposed
listener unless told ``--insecure`` (``insecure = true``), and a hub that runs with one says
so on ``/readyz``, in ``hedwig_hub_insecure`` and in its log.

Loopback is decided from the address as written, never by resolving it: ``127.0.0.0/8``,
``::1`` (also IPv4-mapped) and ``localhost`` are; any other name, ``0.0.0.0`` and ``::`` (every
interface), and an empty host are not. A name that resolves to loopback today may not tomorrow.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hedwig.errors import UsageError

if TYPE_CHECKING:
    from hedwig.settings.hub import HubConfig

INSECURE_MEANING = (
    "anyone who can reach the port can publish, subscribe, read and delete topics and ledgers, "
    "with no identity"
)


def is_loopback(address: str) -> bool:
    """Whether the listen address ``HOST:PORT`` is on loopback only (an IPv6 host bare, as in
    ``::1:4080``, or in brackets)."""
    host = address.strip().rpartition(":")[0].removeprefix("[").removesuffix("]")
    host = host.split("%", 1)[0].rstrip(".").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped.is_loopback
    return ip.is_loopback


@dataclass(frozen=True, slots=True)
class OpenListener:
    """A listener served to anyone who reaches it, and what it lacks."""

    # "client", "external" or "internal".
    name: str
    address: str
    lacks: str

    def __str__(self) -> str:
        return f"the {self.name} listener {self.address} ({self.lacks})"


def open_listeners(config: HubConfig) -> list[OpenListener]:
    """Every listener of ``config`` that serves anyone who reaches it, loopback or not."""
    sec = config.security
    lacks = [
        what for what, on in (("TLS", sec.tls_cert), ("authentication", sec.authenticate)) if not on
    ]
    found: list[OpenListener] = []
    if lacks:
        client_lacks = "no " + ", no ".join(lacks)
        if not sec.internal_listen:
            client_lacks += "; ledgers served on it too"
        found.append(OpenListener("client", config.connection.listen, client_lacks))
        if config.connection.external_listen:
            found.append(OpenListener("external", config.connection.external_listen, client_lacks))
    if sec.internal_listen and not (sec.internal_ca and sec.internal_cert and sec.internal_key):
        found.append(OpenListener("internal", sec.internal_listen, "no TLS, no hub CA"))
    return found


def exposed_listeners(config: HubConfig) -> list[OpenListener]:
    """The open listeners of ``config`` reachable from other machines (not on loopback)."""
    return [o for o in open_listeners(config) if not is_loopback(o.address)]


def check_exposure(config: HubConfig) -> list[OpenListener]:
    """The exposed listeners of ``config``, which it must allow (``insecure``): ``UsageError``
    saying what is open and what that means if it does not."""
    exposed = exposed_listeners(config)
    if exposed and not config.security.insecure:
        raise UsageError(refusal(exposed))
    return exposed


def refusal(exposed: list[OpenListener]) -> str:
    """Why ``hedwig hub`` will not start with ``exposed`` listeners, and how to make it."""
    listed = "; ".join(str(o) for o in exposed)
    return (
        f"refusing to start open to the network: {listed}. Open means {INSECURE_MEANING}. "
        "Secure the hub (tls_cert and tls_key, authenticate, and internal_listen with its TLS: "
        "docs/security.md), listen on loopback only, or pass --insecure (HEDWIG_INSECURE=true) "
        "to run it open anyway"
    )


def warning(exposed: list[OpenListener]) -> str:
    """What an open hub logs at start and answers on ``/readyz``."""
    listed = "; ".join(str(o) for o in exposed)
    return f"insecure: open to the network (--insecure): {listed}: {INSECURE_MEANING}"
