"""The sans-IO codec: round trips, pipelining, and fuzzed garbage that must never crash or hang."""

from __future__ import annotations

import contextlib
import struct
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hedwig.errors import InvalidTopicError, MalformedBatchError, ProtocolError
from hedwig.protocol import (
    AddEntry,
    Batch,
    CloseReason,
    CloseSubscription,
    Connection,
    Consume,
    Deliver,
    EncodedMessages,
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
from hedwig.protocol.messages import encode_message, encode_values, scan_messages, scanning
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION


def message_lists(
    *, value: int, key: int, header: int, headers: int, min_size: int = 0, max_size: int
) -> st.SearchStrategy[list[Message]]:
    """Lists of messages with values, keys (or none), header names and values of at most these
    sizes, and at most ``headers`` headers each."""
    return st.lists(
        st.builds(
            Message,
            value=st.binary(max_size=value),
            key=st.none() | st.binary(max_size=key),
            headers=st.lists(
                st.tuples(st.text(max_size=header), st.binary(max_size=header)), max_size=headers
            ).map(tuple),
        ),
        min_size=min_size,
        max_size=max_size,
    )


MESSAGES = message_lists(value=64, key=16, header=8, headers=3, min_size=1, max_size=8)


def roundtrip(frame: object, sender: Role) -> object:
    src = Connection(sender)
    dst = Connection(Role.HUB if sender is Role.CLIENT else Role.CLIENT)
    dst.receive_data(src.send(frame))  # type: ignore[arg-type]
    (out,) = dst.next_frames()
    return out


@given(MESSAGES, st.text(min_size=1, max_size=20), st.integers(0, 2**63))
def test_publish_and_deliver_round_trip(msgs: list[Message], topic: str, pseq: int) -> None:
    count, payload = encode_messages(msgs)
    messages = EncodedMessages(count=count, payload=payload)
    pub = Publish(
        request_id=7,
        topic=topic,
        publisher_id="p",
        publisher_seq=pseq,
        messages=messages,
        redirected=True,
    )
    assert roundtrip(pub, Role.CLIENT) == pub
    batch = Batch(
        first_seq=5, publish_time_ms=123, publisher_id="p", publisher_seq=pseq, messages=messages
    )
    out = roundtrip(Deliver(topic=topic, subscriber="s", batch=batch), Role.HUB)
    assert isinstance(out, Deliver)
    assert out.batch == batch and out.batch.messages.decode() == msgs
    assert [m.seq for m in out.batch.delivered()] == list(range(5, 5 + count))
    # One flat record per message, made as they are asked for.
    assert [d.message for d in out.batch.delivered()] == msgs
    assert out.batch.delivered() == batch.delivered()


@settings(deadline=None)  # (timing on shared cores says nothing here)
@given(MESSAGES, st.data())
def test_a_delivered_batch_that_lies_is_refused_when_decoded(
    msgs: list[Message], data: st.DataObject
) -> None:
    """Cut short, padded or miscounted: ``MalformedBatchError``, never a wrong message."""
    count, payload = encode_messages(msgs)
    head = Batch(
        first_seq=1,
        publish_time_ms=0,
        publisher_id="p",
        publisher_seq=0,
        messages=EncodedMessages(count=count, payload=payload),
    ).encode()[: -len(payload) or None]
    body = head[:-4]  # without the count
    cut = data.draw(st.integers(0, max(0, len(payload) - 1)))
    lies = [
        body + struct.pack(">I", count + 1) + payload,
        body + struct.pack(">I", count) + payload + b"\0",
    ]
    if payload:
        lies.append(body + struct.pack(">I", count) + payload[:cut])
    for raw in lies:
        with pytest.raises(MalformedBatchError):
            Batch.decode(raw)


@pytest.mark.parametrize(
    ("frame", "sender"),
    [
        (
            Subscribe(
                request_id=1,
                topic="t",
                subscriber="s",
                mode=SubscribeMode.ATTACH,
                message_window=10,
                message_bound=20,
                redirected=True,
                force_attach=True,
            ),
            Role.CLIENT,
        ),
        (Consume(request_id=2, topic="t", subscriber="s", seq=99), Role.CLIENT),
        (Unsubscribe(request_id=3, topic="t", subscriber="s"), Role.CLIENT),
        (CloseSubscription(request_id=4, topic="t", subscriber="s"), Role.CLIENT),
        (Ping(request_id=5), Role.CLIENT),
        (
            Read(
                request_id=6,
                topic="t",
                start_seq=10,
                max_messages=100,
                max_bytes=1000,
                redirected=True,
            ),
            Role.CLIENT,
        ),
        (
            AddEntry(request_id=7, ledger_id=1, entry_id=2, lac=-1, payload=b"xyz", recovery=True),
            Role.CLIENT,
        ),
        (ReadLac(request_id=8, ledger_id=3, fence=True), Role.CLIENT),
        (Ok(request_id=9), Role.HUB),
        (Published(request_id=10, first_seq=1, last_seq=5, duplicate=True), Role.HUB),
        (Subscribed(request_id=11, consumed_seq=3, last_seq=9), Role.HUB),
        (Error(request_id=12, status=1, message="go elsewhere", address="h:1"), Role.HUB),
        (Error(request_id=13, status=7, message="bad", address=None), Role.HUB),
        (TopicMoved(topic="t", new_owner="h:2", reason="rebalanced", subscriber=None), Role.HUB),
        (TopicMoved(topic="t", new_owner=None, reason="gone", subscriber="s"), Role.HUB),
        (
            SubscriptionForcedClosed(
                topic="t", subscriber="s", code=CloseReason.TAKEN_OVER, reason="taken over"
            ),
            Role.HUB,
        ),
        (Lac(request_id=14, lac=-1, last_entry_id=5), Role.HUB),
        (
            Messages(
                request_id=15,
                first_available=1,
                last_seq=2,
                batches=(
                    Batch(
                        first_seq=1,
                        publish_time_ms=0,
                        publisher_id="p",
                        publisher_seq=0,
                        messages=EncodedMessages.of_values([b"a", b"b"]),
                    ),
                ),
            ),
            Role.HUB,
        ),
    ],
)
def test_frames_round_trip(frame: object, sender: Role) -> None:
    assert roundtrip(frame, sender) == frame


def test_pipelined_frames_split_anywhere() -> None:
    src = Connection(Role.CLIENT)
    frames = [
        Publish(
            request_id=i,
            topic="t",
            publisher_id="p",
            publisher_seq=i,
            messages=EncodedMessages.of_values([b"m%d" % i]),
        )
        for i in range(1, 50)
    ]
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
    hub.receive_data(Connection(Role.HUB).send(Ok(request_id=1)))
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
    big = Connection(Role.CLIENT).send(
        Publish(
            request_id=3,
            topic="t",
            publisher_id="p",
            publisher_seq=0,
            messages=EncodedMessages.of_values([b"x" * 5000]),
        )
    )
    small = Connection(Role.CLIENT).send(Ping(request_id=4))
    data = big + small
    got: list[object] = []
    for i in range(0, len(data), 100):
        c.receive_data(data[i : i + 100])
        got += c.next_frames()
    assert got[0] == OversizedFrame(0x01, 3, len(big))
    assert got[1:] == [Ping(request_id=4)]


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
            Publish(
                request_id=1,
                topic="t",
                publisher_id="p",
                publisher_seq=1,
                messages=EncodedMessages.of_values([b"a", b"b"]),
            ),
            Subscribe(request_id=2, topic="t", subscriber="s"),
            Consume(request_id=3, topic="t", subscriber="s", seq=4),
            Read(request_id=4, topic="t", start_seq=1, max_messages=2, max_bytes=3),
            AddEntry(request_id=5, ledger_id=1, entry_id=1, lac=0, payload=b"x"),
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
    raw = Connection(Role.CLIENT).send(Consume(request_id=3, topic="t", subscriber="s", seq=4))
    c = Connection(Role.HUB)
    c.receive_data(raw[:-1])
    assert c.next_frames() == []
    c.receive_data(raw[-1:])
    assert c.next_frames() == [Consume(request_id=3, topic="t", subscriber="s", seq=4)]


def test_length_prefix_claims_more_than_arrives() -> None:
    c = Connection(Role.HUB)
    c.receive_data(struct.pack(">IBBHI", 100, PROTOCOL_VERSION, 0x06, 0, 1))
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


@given(st.text(alphabet=st.sampled_from("az09._~-/%é\n"), min_size=0, max_size=260))
def test_a_plain_name_is_its_own_znode_name_and_the_same_string(name: str) -> None:
    """Names that need no encoding skip ``quote`` and come back as the very string given (a
    hub keeps it, and records filed by the znode name share it); others are as before."""
    try:
        slow = quote(validate_name(name), safe="._~-")
    except InvalidTopicError:
        with pytest.raises(InvalidTopicError):
            encode_name(name)
        return
    fast = encode_name(name)
    assert fast == (slow.replace(".", "%2E") if slow in (".", "..") else slow)
    assert (fast is name) == (fast == name)


@settings(deadline=None)  # (timing on shared cores says nothing here)
@given(MESSAGES, st.data())
def test_slices_of_a_stored_batch_hold_exactly_their_messages(
    msgs: list[Message], data: st.DataObject
) -> None:
    """A stored batch is cut by every window that ends inside it: each cut holds the messages
    of its range, and the offsets measured by the first cut serve the later ones."""
    count, payload = encode_messages(msgs)
    stored = Batch.from_stored(
        Batch(
            first_seq=10,
            publish_time_ms=1,
            publisher_id="p",
            publisher_seq=3,
            messages=EncodedMessages(count=count, payload=payload),
        ).encode()
    )
    for _ in range(3):
        first = data.draw(st.integers(10, 10 + count))
        last = data.draw(st.integers(first - 1, 10 + count))
        cut = stored.slice(first, last)
        lo, hi = max(first, 10) - 10, min(last, 9 + count) - 10 + 1
        assert cut.messages.decode() == msgs[lo:hi]
        assert [d.seq for d in cut.delivered()] == list(range(10 + lo, 10 + max(lo, hi)))
        if cut is not stored:
            assert stored.offsets is not None and len(stored.offsets) == count + 1


def _check_or_error(payload: bytes, count: int) -> int | str:
    try:
        return scanning.largest_message(payload, count)
    except MalformedBatchError:
        return "malformed"


@settings(deadline=None)  # (timing on shared cores says nothing here)
@given(
    st.integers(16, 40),
    st.integers(0, 30),
    st.data(),
)
def test_batches_of_equal_messages_are_checked_as_message_by_message(
    count: int, size: int, data: st.DataObject
) -> None:
    """The strided check of equal messages agrees with reading them one by one, on good
    batches and on every kind of damage (a byte changed, bytes cut or added)."""
    payload = bytearray(encode_values([b"v" * size] * count))
    damage = data.draw(st.sampled_from(["none", "byte", "cut", "add", "key"]))
    if damage == "byte":
        at = data.draw(st.integers(0, len(payload) - 1))
        payload[at] = data.draw(st.integers(0, 255))
    elif damage == "cut":
        del payload[data.draw(st.integers(0, len(payload) - 1)) :]
    elif damage == "add":
        payload += b"\0" * data.draw(st.integers(1, 12))
    elif damage == "key":
        payload = (
            bytearray(encode_message(Message(value=b"v" * size, key=b"k"))) + payload[10 + size :]
        )
    fast = _check_or_error(bytes(payload), count)
    old = scanning.UNIFORM_FROM
    scanning.UNIFORM_FROM = 10**9
    try:
        slow = _check_or_error(bytes(payload), count)
    finally:
        scanning.UNIFORM_FROM = old
    assert fast == slow
    if damage == "none":
        assert fast == size


@settings(deadline=None)
@given(st.integers(16, 40), st.integers(0, 20), st.integers(1, 2**40))
def test_a_delivered_batch_of_equal_messages_decodes_as_any_other(
    count: int, size: int, first: int
) -> None:
    """Equal messages take the strided path (checked at once, values sliced at a fixed stride);
    what comes out is what the message-by-message path makes."""
    values = [bytes([i % 256]) * size for i in range(count)]
    batch = Batch(
        first_seq=first,
        publish_time_ms=5,
        publisher_id="p",
        publisher_seq=1,
        messages=EncodedMessages.of_values(values),
    )
    received = Batch.decode(batch.encode())
    assert received.messages.uniform and received.messages.largest == size
    assert not batch.messages.uniform
    assert received.delivered() == batch.delivered()
    assert [m.value for m in received.delivered()] == values
    assert [m.seq for m in received.delivered()] == list(range(first, first + count))
