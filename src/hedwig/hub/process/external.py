"""The external client listener: clients from outside the hubs' network, on a port of its own.

The same requests as the client listener, answered the same way, through the same doorway
(its bounds count both listeners' unauthenticated connections together, and the client
listener's front sweeps it), with one difference: what is sent names every hub by its
external address (``hedwig.hub.front.outward``). Off unless ``external_listen`` is set; then
the hub listens on it after its client listener (whose bound address it names itself by) and
before it registers, so its alive record carries its external address from the start.
"""

from __future__ import annotations

from hedwig.hub.front.outward import ExternalAddresses
from hedwig.hub.front.server import ClientConnection, HubFrontEnd
from hedwig.metadata.managers import MetadataStore
from hedwig.net.transport import Listener, Network
from hedwig.settings import ConnectionSettings


class ExternalClients:
    def __init__(
        self, front: HubFrontEnd, store: MetadataStore, config: ConnectionSettings, hub_id: str
    ) -> None:
        """Clients as ``front``'s, listening where ``config`` says, as the hub ``hub_id``."""
        self._listen = config.external_listen
        self.address = config.external_address(hub_id)
        self.names = ExternalAddresses(store, front.clock, own=("", self.address))
        self.front = front.twin(self.names)
        self.listener: Listener | None = None

    @property
    def connections(self) -> set[ClientConnection]:
        return self.front.connections

    async def start(self, network: Network, client_address: str) -> str:
        """Listen, if asked to, as the hub known as ``client_address``; the external address
        to publish (``""``: none)."""
        if not self._listen:
            return ""
        self.names.set_own(client_address, self.address)
        await self.names.read()
        self.listener = await network.listen(self._listen, self.front.protocol)
        return self.address
