"""The frames of consumers acknowledging message by message, byte for byte, and NOT_HELD's
count travelling typed."""

from __future__ import annotations

from hedwig.errors import NotHeldError
from hedwig.protocol import (
    Ack,
    Batch,
    Connection,
    EncodedMessages,
    Frame,
    JoinSubscription,
    Nack,
    Redeliver,
    Role,
    SeqRange,
    SubscribeMode,
    SubscriptionType,
    error_from_frame,
)
from hedwig.protocol.schema import Sender
from hedwig.protocol.status import Status, error_frame


def _through(frame: Frame) -> object:
    sender = Role.CLIENT if frame.SENDER is Sender.CLIENT else Role.HUB
    receiver = Connection(Role.HUB if sender is Role.CLIENT else Role.CLIENT)
    receiver.receive_data(Connection(sender).send(frame))
    (got,) = receiver.next_frames()
    return got


def test_an_ack_names_ranges_in_sixteen_bytes_each() -> None:
    ack = Ack(request_id=7, topic="t", subscriber="w", ranges=(SeqRange(3, 3), SeqRange(5, 9)))
    body = ack.encode_body()
    assert body == (
        b"\x00\x01t\x00\x01w"
        + b"\x00\x00\x00\x02"
        + (3).to_bytes(8, "big") * 2
        + (5).to_bytes(8, "big")
        + (9).to_bytes(8, "big")
    )
    assert _through(ack) == ack


def test_join_nack_and_redeliver_round_trip() -> None:
    join = JoinSubscription(
        request_id=1,
        topic="orders",
        subscriber="workers",
        type=SubscriptionType.KEY_SHARED,
        mode=SubscribeMode.ATTACH,
        message_window=100,
        redirected=True,
    )
    assert _through(join) == join
    nack = Nack(request_id=2, topic="t", subscriber="w", delay_ms=1_500, ranges=(SeqRange(4, 4),))
    assert _through(nack) == nack
    batch = Batch(
        first_seq=10,
        publish_time_ms=5,
        publisher_id="p",
        publisher_seq=1,
        messages=EncodedMessages.of_values([b"a", b"b"]),
    )
    again = Redeliver(topic="t", subscriber="w", delivery_count=3, batch=batch)
    got = _through(again)
    assert isinstance(got, Redeliver) and got.delivery_count == 3
    assert [m.value for m in got.batch.delivered()] == [b"a", b"b"]


def test_not_held_says_how_many_and_is_not_retried() -> None:
    frame = error_frame(9, NotHeldError("2 messages not held here", count=2))
    assert frame is not None and frame.status == Status.NOT_HELD and frame.seq == 2
    back = error_from_frame(frame)
    assert isinstance(back, NotHeldError) and back.count == 2 and not back.retriable
