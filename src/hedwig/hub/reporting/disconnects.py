"""Why a hub closed a connection itself, declared once.

A connection the hub closes is counted as ``hedwig_connections_closed_total{reason}``:
``reason`` is one of ``Disconnect`` (a bounded label, whatever a peer sends), every series
made when the metrics are, so that the first closure of each kind is seen by ``increase()``.
``hedwig.hub.front.doorway`` closes the connections that overstay their welcome before
authenticating; ``hedwig.hub.front.server`` those that break the protocol.
"""

from __future__ import annotations

from enum import Enum


class Disconnect(str, Enum):
    # Not authenticated within ``unauthenticated_timeout_s`` of connecting.
    UNAUTHENTICATED_TIMEOUT = "unauthenticated_timeout"
    # A frame begun before authenticating stayed incomplete ``incomplete_frame_timeout_s``.
    INCOMPLETE_FRAME = "incomplete_frame"
    # The hub had ``unauthenticated_connections`` already: refused as it connected.
    HUB_LIMIT = "unauthenticated_limit"
    # Its peer address had ``unauthenticated_connections_per_ip`` already: refused likewise.
    PEER_LIMIT = "peer_limit"
    # ``unauthenticated_refusals`` requests refused before authenticating.
    REFUSALS = "refusals"
    # An authenticated connection's unfinished frame took its principal, or the hub, past what
    # unfinished frames may hold (``hedwig.hub.front.unfinished``).
    UNFINISHED_BYTES = "unfinished_bytes"
    # A frame begun after authenticating stayed unfinished ``unfinished_frame_timeout_s``.
    UNFINISHED_TIMEOUT = "unfinished_timeout"
    # Malformed input (``hedwig.protocol.connection``: BROKEN).
    MALFORMED = "malformed"
    # Its credentials expired and were not renewed.
    EXPIRED = "expired"
    # On the internal listener: a certificate of the hub CA, but not a key this hub pins.
    PEER_KEY = "peer_key"
