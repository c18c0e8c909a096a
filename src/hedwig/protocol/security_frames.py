"""Frames of the authentication handshake.

A connection is authenticated once, before anything else it sends, by one of:

- its TLS client certificate (nothing to send: the hub reads it from the handshake), or
- an ``Authenticate`` request carrying a signed token (a Kubernetes ServiceAccount token, or a
  JWT from an issuer the hub trusts), answered by ``Authenticated`` naming the principal.

A connection may authenticate again on the same connection before its token expires (clients
do, with a fresh token, at four fifths of its lifetime), as the same principal only.
"""

from __future__ import annotations

from hedwig.protocol.fields import U64, RequestId, Str
from hedwig.protocol.schema import FrameBase, Sender, frame

# The mechanisms ``Authenticate`` knows. A token's issuer decides how it is checked.
TOKEN = "token"
MECHANISMS = (TOKEN,)


@frame(0x20, Sender.CLIENT)
class Authenticate(FrameBase):
    """Prove an identity: ``mechanism`` says what ``credentials`` holds (``token``: a JWS in
    compact form). Answered by ``Authenticated`` or UNAUTHENTICATED (an unknown mechanism
    too: the hub decides what it accepts)."""

    request_id: RequestId
    mechanism: Str
    credentials: Str


@frame(0x90, Sender.HUB)
class Authenticated(FrameBase):
    """The connection now acts as ``principal``; its credentials expire at ``expires_ms``
    (milliseconds since the epoch; 0: never)."""

    request_id: RequestId
    principal: Str
    expires_ms: U64 = 0
