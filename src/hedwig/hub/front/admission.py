"""Admission: what the front end asks before it serves a request, and the two answers.

``AccessControl`` (``hedwig.hub.front.access``) is the trust boundary: authentication,
authorization and the closed hub-to-hub plane. A hub with security entirely off (no
authentication, no internal listener, no token issuers) has nothing to check, and admits with
``OpenDoor``: every request is served and every connection is anonymous. Which one a listener
uses is chosen once, when the hub is wired.
"""

from __future__ import annotations

from typing import Protocol

from hedwig.hub.front.access import Caller
from hedwig.protocol import Authenticate, Authenticated, Request
from hedwig.security.principal import ANONYMOUS


class Admission(Protocol):
    def admit(self, conn: Caller, frame: Request, op: str) -> None:
        """Raise the refusal for ``frame`` on ``conn`` (``op`` is its label), if any."""
        ...

    async def authenticate_with(self, conn: Caller, frame: Authenticate) -> Authenticated:
        """Serve AUTHENTICATE."""
        ...


class OpenDoor:
    """Security off: every request admitted, every connection anonymous."""

    def admit(self, conn: Caller, frame: Request, op: str) -> None:
        return None

    async def authenticate_with(self, conn: Caller, frame: Authenticate) -> Authenticated:
        return Authenticated(request_id=frame.request_id, principal=ANONYMOUS.name)
