"""Frames of the region a hub is in: which hubs serve it, and which regions it is linked to.

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
- ``DescribeLinks`` / ``Links``: the asked hub's links to other regions (``--region-links``)
  and how its replication from each stands: topics, lag in messages and in age, messages
  applied (``hedwig links``). With authorization on it needs ``describe`` or ``admin`` on
  the cluster (``hedwig.hub.front.access``): the links name other regions' endpoints.
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


@frame(0x70, Sender.CLIENT)
class DescribeLinks(FrameBase):
    """The asked hub's links to other regions and its replication from each. Answered by
    ``Links``."""

    request_id: RequestId


@frame(0xE0, Sender.HUB)
class Links(FrameBase):
    """The answer to ``DescribeLinks``, one entry per linked region in each list (the lists
    are as long as ``regions``): its client endpoints (comma-separated), the topics this hub
    replicates from it now, their lag in messages, the age in milliseconds of the oldest
    message delivered from it and not yet applied (0: none), and the messages appended here
    from it since the hub started."""

    request_id: RequestId
    region: Str
    regions: Strs
    endpoints: Strs = ()
    topics: U64s = ()
    lag_messages: U64s = ()
    lag_ms: U64s = ()
    replicated: U64s = ()
