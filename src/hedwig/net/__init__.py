"""Connections between clients and hubs, and between hubs: ``HubConnection`` over a
``Network`` (TCP, or in memory for tests)."""

from hedwig.net.connection import HubConnection
from hedwig.net.memory import MemoryNetwork
from hedwig.net.transport import TCP, Network, TcpNetwork

__all__ = ["TCP", "HubConnection", "MemoryNetwork", "Network", "TcpNetwork"]
