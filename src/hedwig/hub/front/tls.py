"""A hub's TLS: the contexts its configuration asks for, the networks that use them, and the
certificate reloading that makes rotation need no restart.

- The client listener serves ``tls_cert`` and accepts (does not require) client certificates
  from ``tls_client_ca``; without ``tls_cert`` it is plaintext.
- The internal listener serves ``internal_cert`` and requires a client certificate from
  ``internal_ca``, the region's hub CA; the connections this hub opens to other hubs present
  the same certificate and check theirs against the same CA. Without those it is plaintext
  (a hub with security off).
- With ``internal_peer_keys``, a peer of the internal listener must also hold a pinned key
  (``hedwig.security.pins``: ``own``, the key of this hub's own internal certificate, which
  every hub of an operator's pool shares, and listed ``sha256/`` pins); a certificate of the
  hub CA with any other key is closed after its handshake (``internal_peers``). Without it,
  any certificate of the hub CA is a hub's (``AnyHub``), as it must be where the CA signs for
  hubs alone.

A hub given a network of its own (in memory, in tests) uses it as it is for both listeners and
every connection (``GivenNetwork``): no TLS, nothing to reload.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

from hedwig.clock import Clock
from hedwig.errors import UsageError
from hedwig.net.tls_listener import HandshakeLimits
from hedwig.net.transport import Network, TcpNetwork
from hedwig.security.pins import KeyPins, parse_pins
from hedwig.security.tls import ReloadingCertificate, client_context, server_context
from hedwig.settings import HubConfig


class PeerCheck(Protocol):
    """Whether a peer that passed the internal listener's handshake is a hub."""

    def admits(self, certificate: bytes | None) -> bool:
        """``certificate``: the peer's, DER (None: none, or no TLS)."""
        ...

    def refresh(self) -> None:
        """Read this hub's own certificate again if it changed."""
        ...


class AnyHub:
    """Every peer that passed the handshake is a hub (no pins, or no TLS in tests)."""

    def admits(self, certificate: bytes | None) -> bool:
        return True

    def refresh(self) -> None:
        return None


class HubNetworks(Protocol):
    """What the hub listens and connects with, and their certificates' reloading."""

    client_network: Network
    internal_network: Network
    internal_peers: PeerCheck

    def reload(self) -> int: ...

    def start_reloading(self, interval_s: float) -> None: ...

    def stop_reloading(self) -> None: ...


class HubTls:
    def __init__(self, config: HubConfig, clock: Clock) -> None:
        self._clock = clock
        self._reloading: list[ReloadingCertificate] = []
        self._task: asyncio.Task[None] | None = None
        server = None
        if config.security.tls_cert:
            server = server_context(
                config.security.tls_cert,
                config.security.tls_key,
                client_ca=config.security.tls_client_ca,
            )
            self._reloading.append(
                ReloadingCertificate(server, config.security.tls_cert, config.security.tls_key)
            )
        # Before its TLS handshake a connection is anyone's: the door's counts hold there too.
        handshakes = HandshakeLimits(
            connections=config.security.unauthenticated_connections,
            per_peer=config.security.unauthenticated_connections_per_ip,
        )
        self.client_network: Network = TcpNetwork(server_tls=server, handshake_limits=handshakes)
        internal_server = internal_client = None
        if config.security.internal_cert:
            internal_server = server_context(
                config.security.internal_cert,
                config.security.internal_key,
                client_ca=config.security.internal_ca,
                require_client_cert=True,
            )
            internal_client = client_context(
                config.security.internal_ca,
                cert=config.security.internal_cert,
                key=config.security.internal_key,
            )
            for ctx in (internal_server, internal_client):
                self._reloading.append(
                    ReloadingCertificate(
                        ctx, config.security.internal_cert, config.security.internal_key
                    )
                )
        self.internal_network: Network = TcpNetwork(
            client_tls=internal_client, server_tls=internal_server, handshake_limits=handshakes
        )
        self.internal_peers: PeerCheck = AnyHub()
        if config.security.internal_peer_keys.strip():
            pins, own = parse_pins(config.security.internal_peer_keys)
            self.internal_peers = KeyPins(
                pins, own_cert=config.security.internal_cert if own else None, clock=clock
            )

    def reload(self) -> int:
        """Reload every certificate whose files changed; how many were."""
        reloaded = sum(r.reload_if_changed() for r in self._reloading)
        self.internal_peers.refresh()
        return reloaded

    def start_reloading(self, interval_s: float) -> None:
        if self._reloading:
            self._task = asyncio.get_running_loop().create_task(self._reload_every(interval_s))

    def stop_reloading(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _reload_every(self, interval_s: float) -> None:
        while True:
            await self._clock.sleep(interval_s)
            with contextlib.suppress(Exception):
                self.reload()


class GivenNetwork:
    """The networks of a hub given one of its own: that one, for everything."""

    def __init__(self, network: Network, config: HubConfig) -> None:
        if config.security.tls_cert or config.security.internal_cert:
            raise UsageError("TLS settings need the hub's own TCP network (network=None)")
        self.client_network = self.internal_network = network
        self.internal_peers: PeerCheck = AnyHub()

    def reload(self) -> int:
        return 0

    def start_reloading(self, interval_s: float) -> None:
        return None

    def stop_reloading(self) -> None:
        return None
