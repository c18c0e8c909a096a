"""Client-side connections to a hub over TCP (asyncio), shared by the client library and by
hubs talking to each other's storage role."""

from hedwig.net.connection import Event, HubConnection

__all__ = ["Event", "HubConnection"]
