"""The subscriber's inbox: batches handed out a message at a time, in order, by ``pop`` and
by iteration alike; errors and the end in their place; a drop forgets only messages."""

from __future__ import annotations

from collections.abc import Iterator

from hedwig.client.subscribing.inbox import EMPTY, Inbox
from hedwig.errors import HedwigError
from hedwig.protocol import Batch, DeliveredMessage, EncodedMessages


def batch(first: int, n: int) -> Iterator[DeliveredMessage]:
    return Batch(
        first_seq=first,
        publish_time_ms=0,
        publisher_id="p",
        publisher_seq=0,
        messages=EncodedMessages.of_values([b"%d" % s for s in range(first, first + n)]),
    ).iter_delivered()


def test_pop_and_batches_share_one_order() -> None:
    inbox = Inbox()
    assert inbox.pop() is EMPTY and inbox.next_batch() is EMPTY
    inbox.put_messages(batch(1, 3))
    error = HedwigError("stop")
    inbox.put(error)
    inbox.put_messages(batch(4, 2))
    inbox.put(None)
    first = inbox.pop()
    assert isinstance(first, DeliveredMessage) and first.seq == 1
    rest = inbox.next_batch()
    assert isinstance(rest, Iterator)
    assert [m.seq for m in rest] == [2, 3]
    inbox.current = None  # used up
    assert inbox.pop() is error
    got = [inbox.pop(), inbox.pop()]
    assert [m.value for m in got if isinstance(m, DeliveredMessage)] == [b"4", b"5"]
    assert inbox.pop() is None
    assert inbox.pop() is EMPTY


def test_a_drop_forgets_messages_and_keeps_errors() -> None:
    inbox = Inbox()
    inbox.put_messages(batch(1, 3))
    assert isinstance(inbox.pop(), DeliveredMessage)
    error = HedwigError("stop")
    inbox.put(error)
    inbox.put_messages(batch(4, 2))
    inbox.drop_messages()
    assert inbox.pop() is error
    assert inbox.pop() is EMPTY
