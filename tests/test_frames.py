"""Frames as declared: every frame type round-trips, construction refuses what cannot travel,
flags are named per frame, and the error table maps every status both ways."""

from __future__ import annotations

import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hedwig import errors
from hedwig.errors import MalformedBatchError, ProtocolError, UsageError
from hedwig.protocol import (
    FRAME_TYPES,
    Batch,
    Connection,
    EncodedMessages,
    Error,
    Lac,
    LaneInfo,
    LedgerLac,
    Ok,
    Publish,
    Published,
    Read,
    RefusedFrame,
    Role,
    Subscribe,
    SubscriptionType,
    WriteLacs,
    encode_value,
)
from hedwig.protocol.fields import (
    BatchCodec,
    BatchListCodec,
    BoolCodec,
    Codec,
    EnumCodec,
    Int,
    LedgerIdsCodec,
    MessagesCodec,
    OptStrCodec,
    RecordsCodec,
    RestCodec,
    StrCodec,
    StrsCodec,
    SubscriptionInfo,
    SubscriptionInfosCodec,
)
from hedwig.protocol.messages import encode_values
from hedwig.protocol.queue_frames import QueueInfo, QueueInfosCodec
from hedwig.protocol.schema import FrameBase, Sender
from hedwig.protocol.status import (
    Status,
    error_frame,
    error_from_frame,
    internal_error_frame,
    status_of,
)
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION
from tests.test_protocol import message_lists

MESSAGES = message_lists(value=32, key=8, header=6, headers=2, max_size=5).map(
    EncodedMessages.of_messages
)

BATCHES = st.builds(
    lambda first, t, pid, pseq, msgs: Batch(
        first_seq=first, publish_time_ms=t, publisher_id=pid, publisher_seq=pseq, messages=msgs
    ),
    st.integers(1, 2**40),
    st.integers(0, 2**50),
    st.text(max_size=10),
    st.integers(0, 2**40),
    MESSAGES,
)


def strategy_for(codec: Codec) -> st.SearchStrategy[Any]:
    """An example value for any field codec the schema has; a new codec must be added here."""
    if isinstance(codec, Int):
        return st.integers(codec.lo, codec.hi)
    if isinstance(codec, EnumCodec):
        return st.sampled_from(list(codec.enum))
    if isinstance(codec, StrCodec):
        return st.text(max_size=20)
    if isinstance(codec, OptStrCodec):
        return st.none() | st.text(max_size=20)
    if isinstance(codec, RestCodec):
        return st.binary(max_size=40)
    if isinstance(codec, MessagesCodec):
        return MESSAGES
    if isinstance(codec, BatchCodec):
        return BATCHES
    if isinstance(codec, BatchListCodec):
        return st.lists(BATCHES, max_size=3).map(tuple)
    if isinstance(codec, SubscriptionInfosCodec):
        infos = st.builds(
            SubscriptionInfo,
            st.text(max_size=10),
            st.integers(0, 2**63),
            st.booleans(),
            st.integers(0, 2**50),
        )
        return st.lists(infos, max_size=4).map(tuple)
    if isinstance(codec, QueueInfosCodec):
        queues = st.builds(
            QueueInfo,
            st.text(max_size=10),
            st.sampled_from(list(SubscriptionType)),
            st.integers(0, 2**32 - 1),
            *(st.integers(0, 2**64 - 1) for _ in range(4)),
        )
        return st.lists(queues, max_size=4).map(tuple)
    if isinstance(codec, BoolCodec):
        return st.booleans()
    if isinstance(codec, RecordsCodec):
        # Every value each field accepts, its bounds included.
        records = st.builds(codec.record, *(strategy_for(c) for _, c in codec.fields))
        return st.lists(records, max_size=4).map(tuple)
    if isinstance(codec, LedgerIdsCodec):
        return st.lists(st.integers(0, 2**64 - 1), max_size=4).map(tuple)
    if isinstance(codec, StrsCodec):
        return st.lists(st.text(max_size=20), max_size=4).map(tuple)
    raise AssertionError(f"no example strategy for {type(codec).__name__}")


def frame_strategy(cls: type[FrameBase]) -> st.SearchStrategy[Any]:
    fields: dict[str, st.SearchStrategy[Any]] = {
        name: strategy_for(codec) for name, codec in cls.FIELD_CODECS
    }
    fields.update({name: st.booleans() for name, _ in cls.FLAG_BITS})
    if "request_id" in cls.__dataclass_fields__:  # type: ignore[attr-defined]
        fields["request_id"] = st.integers(0, 2**32 - 1)
    return st.builds(cls, **fields)


def roundtrip(frame: Any) -> Any:
    sender = Role.CLIENT if frame.SENDER is Sender.CLIENT else Role.HUB
    receiver = Role.HUB if sender is Role.CLIENT else Role.CLIENT
    dst = Connection(receiver)
    dst.receive_data(Connection(sender).send(frame))
    (out,) = dst.next_frames()
    return out


def one_message(first_seq: int, publish_time_ms: int, value: bytes) -> Batch:
    """A batch of one message, of publisher ``p``'s first."""
    return Batch(
        first_seq=first_seq,
        publish_time_ms=publish_time_ms,
        publisher_id="p",
        publisher_seq=0,
        messages=EncodedMessages.of_values([value]),
    )


@pytest.mark.parametrize("cls", FRAME_TYPES, ids=lambda c: c.__name__)
def test_every_frame_type_round_trips(cls: type[FrameBase]) -> None:
    @settings(max_examples=60, deadline=None)
    @given(frame_strategy(cls))
    def check(frame: Any) -> None:
        assert roundtrip(frame) == frame

    check()


def test_type_codes_are_unique_and_in_their_senders_range() -> None:
    codes = [cls.TYPE for cls in FRAME_TYPES]
    assert len(set(codes)) == len(codes)
    for cls in FRAME_TYPES:
        assert (cls.TYPE >= 0x80) == (cls.SENDER is Sender.HUB), cls.__name__


def test_flag_bits_are_named_per_frame() -> None:
    flags = {cls.__name__: dict(cls.FLAG_BITS) for cls in FRAME_TYPES if cls.FLAG_BITS}
    assert flags == {
        "Publish": {"redirected": 0},
        "Subscribe": {"redirected": 0, "force_attach": 1},
        "Read": {"redirected": 0},
        "TopicStats": {"redirected": 0},
        "DeleteTopic": {"redirected": 0, "force": 1},
        "ResetSubscription": {"redirected": 0},
        "DescribeTopic": {"redirected": 0},
        "TailTopic": {"redirected": 0},
        "JoinSubscription": {"redirected": 0},
        "CreateSubscription": {"redirected": 0},
        "DescribeQueues": {"redirected": 0},
        "AddEntry": {"recovery": 0},
        "ReadLac": {"fence": 0},
        "Lac": {"fenced": 0},
        "Published": {"duplicate": 0},
        "Ok": {"fences_batched": 0, "answers_hub_alive": 1},
        "HubAliveAnswer": {"alive": 0},
    }
    header = Connection(Role.CLIENT).send(
        Subscribe(request_id=1, topic="t", subscriber="s", redirected=False, force_attach=True)
    )
    assert HEADER.unpack_from(header)[3] == 0b10


def test_a_flag_bit_a_frame_does_not_name_is_ignored() -> None:
    """A bit added to a frame's flags later (OK's ``fences_batched``) reaches a peer that does
    not know it as the frame without it, not as a broken connection."""
    ok = bytearray(Connection(Role.HUB).send(Ok(request_id=5, fences_batched=True)))
    assert HEADER.unpack_from(ok)[3] == 0b1
    client = Connection(Role.CLIENT)
    client.receive_data(bytes(ok))
    assert client.next_frames() == [Ok(request_id=5, fences_batched=True)]
    lac = bytearray(Connection(Role.HUB).send(Lac(request_id=6, lac=1, last_entry_id=2)))
    struct.pack_into(">H", lac, 6, 0b110)  # bits LAC does not name
    client.receive_data(bytes(lac))
    assert client.next_frames() == [Lac(request_id=6, lac=1, last_entry_id=2)]


def test_construction_is_keyword_only_and_checked() -> None:
    with pytest.raises(TypeError):
        Published(1, 2, 3)  # type: ignore[call-arg]
    with pytest.raises(UsageError, match="first_seq"):
        Published(request_id=1, first_seq=-1, last_seq=3)
    with pytest.raises(UsageError, match="request_id"):
        Published(request_id=2**32, first_seq=1, last_seq=3)
    with pytest.raises(UsageError, match="SubscribeMode"):
        Subscribe(request_id=1, topic="t", subscriber="s", mode=7)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="str"):
        Read(request_id=1, topic=b"t", start_seq=0, max_messages=1, max_bytes=1)  # type: ignore[arg-type]


def test_a_record_list_names_the_record_and_field_it_refuses() -> None:
    WriteLacs(request_id=1, lacs=(LedgerLac(ledger_id=2**64 - 1, lac=-1),))
    with pytest.raises(UsageError, match=r"lacs\[1\]\.lac must be an integer in -1\.\."):
        WriteLacs(request_id=1, lacs=(LedgerLac(1, 0), LedgerLac(ledger_id=2, lac=-2)))
    with pytest.raises(UsageError, match=r"lacs\[0\]\.ledger_id"):
        WriteLacs(request_id=1, lacs=(LedgerLac(ledger_id=2**64, lac=0),))
    with pytest.raises(UsageError, match=r"lacs\[0\] must be a LedgerLac, got LaneInfo"):
        WriteLacs(request_id=1, lacs=(LaneInfo(index=0, sealed=False),))  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="must be a tuple of LedgerLac, got list"):
        WriteLacs(request_id=1, lacs=[LedgerLac(1, 0)])  # type: ignore[arg-type]


def test_a_count_that_does_not_match_the_payload_is_refused_at_construction() -> None:
    payload = encode_values([b"a", b"bb"])
    assert EncodedMessages(count=2, payload=payload).largest == 2
    for wrong in (0, 1, 3):
        with pytest.raises(MalformedBatchError):
            EncodedMessages(count=wrong, payload=payload)
    assert EncodedMessages.of([encode_value(b"a"), encode_value(b"bb")]).payload == payload


def _publish_bytes(count: int, payload: bytes, rid: int = 9) -> bytes:
    """A PUBLISH frame built by hand, so its count can lie (the constructor would refuse)."""
    topic, pid = b"t", b"p"
    body = (
        struct.pack(">H", len(topic))
        + topic
        + struct.pack(">H", len(pid))
        + pid
        + struct.pack(">QI", 0, count)
        + payload
    )
    return HEADER.pack(len(body) + 8, PROTOCOL_VERSION, 0x01, 0, rid) + body


def test_a_lying_batch_is_refused_and_the_connection_stays_open() -> None:
    hub = Connection(Role.HUB)
    hub.receive_data(_publish_bytes(5, encode_values([b"y"]), rid=9))
    hub.receive_data(_publish_bytes(1, encode_values([b"y"]), rid=10))
    first, second = hub.next_frames()
    assert isinstance(first, RefusedFrame) and first.request_id == 9
    assert not hub.broken
    assert isinstance(second, Publish)
    assert second.count == 1 and second.request_id == 10
    # A hub that sends a lying batch to a client broke the protocol.
    client = Connection(Role.CLIENT)
    bad = one_message(1, 0, b"a").encode()
    body = struct.pack(">H", 1) + b"t" + struct.pack(">H", 1) + b"s" + bad[:-3] + b"\x00\x00\x05"
    client.receive_data(HEADER.pack(len(body) + 8, PROTOCOL_VERSION, 0xC0, 0, 0) + body)
    with pytest.raises(ProtocolError):
        client.next_frames()


def test_read_answers_carry_batches_as_stored() -> None:
    stored = one_message(3, 7, b"x").with_raw()
    assert stored.raw is not None
    assert Batch.from_stored(stored.raw).encode() is stored.raw


# The error table ---------------------------------------------------------------------------


def test_every_status_comes_back_as_one_class() -> None:
    for status in Status:
        if status is Status.OK:
            continue
        exc = error_from_frame(Error(request_id=1, status=status, message="m"))
        assert status_of(exc) is status, status
        assert str(exc) == "m"


@pytest.mark.parametrize(
    ("exc", "status", "field", "value"),
    [
        (
            errors.NotResponsibleError("x", owner="h:1"),
            Status.NOT_RESPONSIBLE_FOR_TOPIC,
            "owner",
            "h:1",
        ),
        (
            errors.TopicMovingError("x", destination="h:2"),
            Status.TOPIC_MOVING,
            "destination",
            "h:2",
        ),
        (
            errors.MessagesUnavailableError("x", first_available=41),
            Status.MESSAGES_UNAVAILABLE,
            "first_available",
            41,
        ),
    ],
)
def test_typed_detail_travels(
    exc: errors.HedwigError, status: Status, field: str, value: object
) -> None:
    frame = error_frame(5, exc)
    assert frame is not None and frame.status == status
    back = roundtrip(frame)
    again = error_from_frame(back)
    assert type(again) is type(exc)
    assert getattr(again, field) == value


def test_domain_errors_map_to_what_the_client_should_do() -> None:
    assert status_of(errors.MetadataUnavailableError("zk down")) is Status.SERVICE_UNAVAILABLE
    assert status_of(errors.NotEnoughReplicasError("2 of 3")) is Status.SERVICE_UNAVAILABLE
    assert status_of(errors.LedgerFencedError("fenced")) is Status.LEDGER_FENCED
    assert status_of(MalformedBatchError("lies")) is Status.INVALID_REQUEST
    assert error_from_frame(error_frame(1, errors.SubscriptionExistsError("s"))).retriable is False  # type: ignore[arg-type]


def test_an_unmapped_error_is_internal_and_not_retried() -> None:
    bug = KeyError("oops")
    assert status_of(bug) is None and error_frame(1, bug) is None
    answer = internal_error_frame(1, bug)
    exc = error_from_frame(answer)
    assert isinstance(exc, errors.InternalError)
    assert not exc.retriable
    assert "KeyError" in str(exc)
