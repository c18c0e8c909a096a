"""A hub's TLS: the contexts its configuration asks for, the networks that use them, and the
certificate reloading that makes rotation need no restart.

- The client listener serves ``tls_cert`` and accepts (does not require) client certificates
  from ``tls_client_ca``; without ``tls_cert`` it is plaintext.
- The internal listener serves ``internal_cert`` and requires a client certificate from
  ``internal_ca``, the region's hub CA; the connections this hub opens to other hubs present
  the same certificate and check theirs against the same CA. Without those it is plaintext
  (a hub with security off).
"""

from __future__ import annotations

import asyncio
import contextlib

from hedwig.hub.config import HubConfig
from hedwig.net.transport import TcpNetwork
from hedwig.security.tls import ReloadingCertificate, client_context, server_context


class HubTls:
    def __init__(self, config: HubConfig) -> None:
        self._reloading: list[ReloadingCertificate] = []
        self._task: asyncio.Task[None] | None = None
        server = None
        if config.tls_cert:
            server = server_context(config.tls_cert, config.tls_key, client_ca=config.tls_client_ca)
            self._reloading.append(ReloadingCertificate(server, config.tls_cert, config.tls_key))
        self.client_network = TcpNetwork(server_tls=server)
        internal_server = internal_client = None
        if config.internal_cert:
            internal_server = server_context(
                config.internal_cert,
                config.internal_key,
                client_ca=config.internal_ca,
                require_client_cert=True,
            )
            internal_client = client_context(
                config.internal_ca, cert=config.internal_cert, key=config.internal_key
            )
            for ctx in (internal_server, internal_client):
                self._reloading.append(
                    ReloadingCertificate(ctx, config.internal_cert, config.internal_key)
                )
        self.internal_network = TcpNetwork(client_tls=internal_client, server_tls=internal_server)

    def reload(self) -> int:
        """Reload every certificate whose files changed; how many were."""
        return sum(r.reload_if_changed() for r in self._reloading)

    def start_reloading(self, interval_s: float) -> None:
        if self._reloading:
            self._task = asyncio.get_running_loop().create_task(self._reload_every(interval_s))

    def stop_reloading(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _reload_every(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(Exception):
                self.reload()
