"""A batch on its way: cut from the queue, outstanding until it settles, then told in order.

It carries what the hub needs to recognise it when it is sent again (the publisher identity
and the publisher sequence of its first message), where it goes (the topic, or the lane of it
that takes this publisher), its queued parts (to queue them again if a lane refuses it), and
its outcome, kept until every batch cut before it has had its own told
(``TopicPublisher._tell_in_order``).
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.client.publishing.waiters import Waiter
from hedwig.errors import HedwigError
from hedwig.protocol import EncodedMessages, Published


@dataclass(slots=True)
class OutgoingBatch:
    publisher_id: str
    pseq: int
    messages: EncodedMessages
    # One per message, or one per chunk (then ``has_chunks``).
    waiters: list[Waiter]
    has_chunks: bool
    # The topic (or lane) it is sent to, and that lane's index (0: the topic itself).
    target: str
    lane: int
    # Its queued parts: one encoded message, or one chunk, each.
    raws: list[bytes]
    # Its outcome: the answer, or the error it failed with for good (neither: refused by a
    # lane, and queued again).
    finished: bool = False
    answer: Published | None = None
    error: HedwigError | None = None
