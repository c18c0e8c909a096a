"""What an owned topic needs from a client connection: a way to push frames, with backpressure."""

from __future__ import annotations

from typing import Protocol

from hedwig.protocol import Frame
from hedwig.security.principal import Principal


class Peer(Protocol):
    name: str
    # Who it is: a subscription it creates is that principal's (``hedwig.hub.front.owners``).
    principal: Principal

    @property
    def closed(self) -> bool: ...

    def send(self, frame: Frame) -> None:
        """Queue a frame for the client; never blocks."""
        ...

    async def writable(self) -> None:
        """Return once the connection's send buffer has drained below its high-water mark."""
        ...
