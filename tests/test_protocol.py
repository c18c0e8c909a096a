"""The sans-IO codec: round trips, pipelining, and fuzzed garbage that must never crash or hang."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hedwig.errors import InvalidTopicError, ProtocolError
from hedwig.protocol import (
    AddEntry,
    Batch,
    CloseSubscription,
    Connection,
    Consume,
    Deliver,
    Error,
    Lac,
    Message,
    Messages,
    Ok,
    OversizedFrame,
    Ping,
    Publish,
    Published,
    Read,
    ReadLac,
    Role,
    Subscribe,
    Subscribed,
    SubscribeMode,
    SubscriptionForcedClosed,
    TopicMoved,
    Unsubscribe,
    decode_name,
    encode_messages,
    encode_name,
    validate_name,
)
from hedwig.protocol.frames import HEADER, encode_values, scan_messages

MESSAGES = st.lists(
    st.builds(
        Message,
        value=st.binary(max_size=64),
        key=st.none() | st.binary(max_size=16),
        headers=st.lists(st.tuples(st.text(max_size=8), st.binary(max_size=8)), max_size=3).map(
            tuple
        ),
    ),
    min_size=1,
    max_size=8,
)


def roundtrip(frame: object, sender: Role) -> object:
    src = Connection(sender)
    dst = Connection(Role.HUB if sender is Role.CLIENT else Role.CLIENT)
    dst.receive_data(src.send(frame))  # type: ignore[arg-type]
    (out,) = dst.next_frames()
    return out


@given(MESSAGES, st.text(min_size=1, max_size=20), st.integers(0, 2**63))
def test_publish_and_deliver_round_trip(msgs: list[Message], topic: str, pseq: int) -> None:
    count, payload = encode_messages(msgs)
    pub = Publish(7, topic, "p", pseq, count, payload, redirected=True)
    assert roundtrip(pub, Role.CLIENT) == pub
    batch = Batch(5, 123, "p", pseq, count, payload)
    out = roundtrip(Deliver(topic, "s", batch), Role.HUB)
    assert isinstance(out, Deliver)
    assert out.batch == batch and out.batch.messages() == msgs
    assert [m.seq for m in out.batch.delivered()] == list(range(5, 5 + count))


@pytest.mark.parametrize(
    ("frame", "sender"),
    [
        (Subscribe(1, "t", "s", SubscribeMode.ATTACH, 10, 20, True, True), Role.CLIENT),
        (Consume(2, "t", "s", 99), Role.CLIENT),
        (Unsubscribe(3, "t", "s"), Role.CLIENT),
        (CloseSubscription(4, "t", "s"), Role.CLIENT),
        (Ping(5), Role.CLIENT),
        (Read(6, "t", 10, 100, 1000, True), Role.CLIENT),
        (AddEntry(7, 1, 2, -1, b"xyz", True), Role.CLIENT),
        (ReadLac(8, 3, True), Role.CLIENT),
        (Ok(9), Role.HUB),
        (Published(10, 1, 5, True), Role.HUB),
        (Subscribed(11, 3, 9), Role.HUB),
        (Error(12, 1, "go elsewhere", "h:1"), Role.HUB),
        (Error(13, 7, "bad", None), Role.HUB),
        (TopicMoved("t", "h:2", "rebalanced", None), Role.HUB),
        (TopicMoved("t", None, "gone", "s"), Role.HUB),
        (SubscriptionForcedClosed("t", "s", "taken over"), Role.HUB),
        (Lac(14, -1, 5), Role.HUB),
        (
            Messages(15, 1, 2, (Batch(1, 0, "p", 0, 2, encode_values([b"a", b"b"])),)),
            Role.HUB,
        ),
    ],
)
def test_frames_round_trip(frame: object, sender: Role) -> None:
    assert roundtrip(frame, sender) == frame


def test_pipelined_frames_split_anywhere() -> None:
    src = Connection(Role.CLIENT)
    frames = [Publish(i, "t", "p", i, 1, encode_values([b"m%d" % i])) for i in range(1, 50)]
    data = b"".join(src.send(f) for f in frames)
    for step in (1, 7, 64, len(data)):
        dst = Connection(Role.HUB)
        got: list[object] = []
        for i in range(0, len(data), step):
            dst.receive_data(data[i : i + step])
            got += dst.next_frames()
        assert got == frames


def test_wrong_direction_is_refused() -> None:
    hub = Connection(Role.HUB)
    hub.receive_data(Connection(Role.HUB).send(Ok(1)))
    with pytest.raises(ProtocolError):
        hub.next_frames()
    assert hub.broken
    with pytest.raises(ProtocolError):
        hub.receive_data(b"more")


def test_bad_version_and_unknown_type() -> None:
    for raw in (
        HEADER.pack(8, 99, 0x06, 0, 1),  # version 99
        HEADER.pack(8, 1, 0x7E, 0, 1),  # unknown type
        HEADER.pack(3, 1, 0x06, 0, 1),  # length shorter than the header
        HEADER.pack(9, 1, 0x06, 0, 1) + b"x",  # ping with a trailing byte
    ):
        c = Connection(Role.HUB)
        c.receive_data(raw)
        with pytest.raises(ProtocolError):
            c.next_frames()


def test_oversized_frame_is_skipped_not_fatal() -> None:
    c = Connection(Role.HUB, max_frame_size=1024)
    big = Connection(Role.CLIENT).send(Publish(3, "t", "p", 0, 1, encode_values([b"x" * 5000])))
    small = Connection(Role.CLIENT).send(Ping(4))
    data = big + small
    got: list[object] = []
    for i in range(0, len(data), 100):
        c.receive_data(data[i : i + 100])
        got += c.next_frames()
    assert got[0] == OversizedFrame(0x01, 3, len(big))
    assert got[1:] == [Ping(4)]


def test_batch_count_mismatch_and_oversized_message() -> None:
    payload = encode_values([b"a", b"bb"])
    with pytest.raises(ProtocolError):
        scan_messages(payload, 3, 100)
    with pytest.raises(ProtocolError):
        scan_messages(payload, 1, 100)
    with pytest.raises(ValueError, match="2"):
        scan_messages(payload, 2, 1)
    assert scan_messages(payload, 2, 2) == [0, 11]


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.binary(max_size=300), st.sampled_from([Role.HUB, Role.CLIENT]))
def test_fuzz_garbage_never_crashes(data: bytes, role: Role) -> None:
    c = Connection(role, max_frame_size=4096)
    try:
        c.receive_data(data)
        c.next_frames()
    except ProtocolError:
        pass


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(
        [
            Publish(1, "t", "p", 1, 2, encode_values([b"a", b"b"])),
            Subscribe(2, "t", "s"),
            Consume(3, "t", "s", 4),
            Read(4, "t", 1, 2, 3),
            AddEntry(5, 1, 1, 0, b"x"),
        ]
    ),
    st.integers(0, 200),
    st.integers(0, 255),
    st.booleans(),
)
def test_fuzz_mutated_and_truncated_frames(frame: object, pos: int, byte: int, cut: bool) -> None:
    """A valid frame with one byte changed, or cut short: a frame, a protocol error, or
    (truncated) nothing yet. Never another exception, never a hang."""
    raw = bytearray(Connection(Role.CLIENT).send(frame))  # type: ignore[arg-type]
    if cut:
        raw = raw[: pos % len(raw)]
    else:
        raw[pos % len(raw)] = byte
    c = Connection(Role.HUB, max_frame_size=4096)
    try:
        c.receive_data(bytes(raw))
        for f in c.next_frames():
            if isinstance(f, Publish):
                with contextlib.suppress(ProtocolError, ValueError):
                    scan_messages(f.payload, f.count, 1 << 20)
    except ProtocolError:
        pass


def test_truncated_frame_waits_for_more() -> None:
    raw = Connection(Role.CLIENT).send(Consume(3, "t", "s", 4))
    c = Connection(Role.HUB)
    c.receive_data(raw[:-1])
    assert c.next_frames() == []
    c.receive_data(raw[-1:])
    assert c.next_frames() == [Consume(3, "t", "s", 4)]


def test_length_prefix_claims_more_than_arrives() -> None:
    c = Connection(Role.HUB)
    c.receive_data(struct.pack(">I", 100) + b"\x01\x06\x00\x00\x00\x00\x00\x01")
    assert c.next_frames() == []


@pytest.mark.parametrize(
    ("name", "encoded"),
    [
        ("plain-topic_1.x~", "plain-topic_1.x~"),
        ("a/b", "a%2Fb"),
        ("../x", "..%2Fx"),
        (".", "%2E"),
        ("..", "%2E%2E"),
        ("%", "%25"),
        ("with space", "with%20space"),
        ("ünï", "%C3%BCn%C3%AF"),
    ],
)
def test_names_encode_to_single_safe_znode(name: str, encoded: str) -> None:
    assert encode_name(name) == encoded
    assert "/" not in encoded and encoded not in (".", "..")
    assert decode_name(encoded) == name


@pytest.mark.parametrize("bad", ["", "x" * 256, "tab\there", "new\nline", "nul\x00", "é" * 128])
def test_names_rejected(bad: str) -> None:
    with pytest.raises(InvalidTopicError):
        validate_name(bad)


@given(st.text(min_size=1, max_size=60).filter(str.isprintable))
def test_names_bijective(name: str) -> None:
    if len(name.encode()) > 255:
        return
    enc = encode_name(name)
    assert "/" not in enc and enc not in (".", "..") and decode_name(enc) == name
