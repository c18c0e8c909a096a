"""Frames of the region a hub is in: which hubs serve it.

- ``DescribeRegion`` / ``Region``: every hub of the region alive now, as the asked hub's
  registry has it (client addresses, this hub first). A client asks the first hub it reaches
  and adds the others to the hubs it may send a request to, so losing the hub it was given
  (``hedwig pub --hub H``, and H dies) never leaves it with nowhere to go: the survivors
  redirect it to the topic's new owner. Any client may ask (an authenticated one, with
  authentication on): the list is where every client is sent by redirects anyway.

  A region whose hubs own topics by bundle (``hedwig.metadata.bundles``) also gives its
  bundle map's ``boundaries`` and each bundle's owner as the hub knows it (``owners``, one per
  bundle, "" for none known), so the client sends a topic it has not used yet to its
  bundle's owner instead of a hub that would redirect it (two in three, in a region of three).
  Without bundles both are empty.
"""

from __future__ import annotations

from hedwig.protocol.fields import RequestId, Str, Strs, U64s
from hedwig.protocol.schema import FrameBase, Sender, frame


@frame(0x50, Sender.CLIENT)
class DescribeRegion(FrameBase):
    """The region's alive hubs. Answered by ``Region``."""

    request_id: RequestId


@frame(0xB0, Sender.HUB)
class Region(FrameBase):
    """The answer to ``DescribeRegion``: the region's name and its alive hubs' client
    addresses, the answering hub first; by bundle, the map's boundaries and each bundle's
    owner ("": none known)."""

    request_id: RequestId
    region: Str
    hubs: Strs
    boundaries: U64s = ()
    owners: Strs = ()
