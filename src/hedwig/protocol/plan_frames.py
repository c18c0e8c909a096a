"""Frames of topics served by more than one hub (``hedwig.metadata.plans``).

- ``TailTopic``: a delivery hub tails the owner's confirmed log. It is READ with a wait: the
  owner answers at once if it has messages after ``after_seq``, else when the first arrives or
  ``wait_ms`` has passed (a long poll, so a delivery hub adds one round trip, not a polling
  interval). Hub to hub it goes over the internal listener with the hub's certificate; a
  client may send it too, with the ``read`` permission.
- ``DeliveryStats``: how many subscribers of a topic are attached at a delivery hub. A topic's
  owner asks each live delivery hub of its plan before a delete without force, which is
  refused while any subscriber is attached anywhere, not only at the owner.
- ``SubscriptionMoved``: the topic's plan now sends this subscriber to another hub (``hub``;
  none: the topic's owner). The hub that sent it has written the subscription's consume mark
  first, so the subscriber attaches there and delivery continues after the mark: nothing
  skipped. The sender goes on delivering, writing nothing, until the subscriber closes the
  subscription there once attached at ``hub`` (make-before-break), or for two seconds.
- ``DescribeLanes`` / ``Lanes``: which lanes a topic has (lane 0 alone for a topic not served
  by lanes), answered by any hub from the plan it watches. A subscriber asks when it
  subscribes and whenever a hub says the lanes changed (``LanesChanged``, sent by the owner of
  lane 0 to the subscribers attached there): it then subscribes to each lane it does not read
  yet, with the same subscription name, and keeps reading sealed lanes to their end.
"""

from __future__ import annotations

from hedwig.protocol.client_frames import Redirected
from hedwig.protocol.fields import U32, U64, LaneInfos, OptStr, RequestId, Str
from hedwig.protocol.schema import FrameBase, Sender, frame


@frame(0x30, Sender.CLIENT)
class TailTopic(FrameBase):
    """Messages after ``after_seq``, waiting up to ``wait_ms`` for the first. Answered by
    ``Messages`` (``max_messages`` 0: only the bounds, at once)."""

    request_id: RequestId
    topic: Str
    after_seq: U64
    max_messages: U32
    max_bytes: U32
    wait_ms: U32
    redirected: Redirected = False


@frame(0x31, Sender.CLIENT)
class DeliveryStats(FrameBase):
    """The subscribers of ``topic`` attached at this hub as one of its delivery hubs. Answered
    by ``TopicInfo`` (the tail's bounds); zeros from a hub that does not deliver the topic."""

    request_id: RequestId
    topic: Str


@frame(0x32, Sender.CLIENT)
class DescribeLanes(FrameBase):
    """The lanes of ``topic``. Answered by ``Lanes``; NO_SUCH_TOPIC if it does not exist."""

    request_id: RequestId
    topic: Str


@frame(0x88, Sender.HUB)
class Lanes(FrameBase):
    """The answer to ``DescribeLanes``: every lane a subscriber reads (lane 0 first), as of
    the plan's ``generation``. A lane's topic is ``lane_name(topic, index)``."""

    request_id: RequestId
    generation: U64
    lanes: LaneInfos


@frame(0xC4, Sender.HUB)
class LanesChanged(FrameBase):
    """The lanes of ``topic`` changed (plan ``generation``): ask again (``DescribeLanes``)."""

    topic: Str
    generation: U64


@frame(0xC3, Sender.HUB)
class SubscriptionMoved(FrameBase):
    """Attach this subscription at ``hub`` (none: the topic's owner) from now on."""

    topic: Str
    subscriber: Str
    hub: OptStr
    reason: Str = ""
