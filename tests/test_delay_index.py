"""The owner's index of a queue subscription's delayed messages (``DelayIndex``), sans-IO on
times passed in: due messages come out soonest first and only when due, the index holds at
most its bound (the ones due soonest), and what it spilled is asked for again from the log
(a pass) when it has drained or when a spilled message falls due; and the header a
publisher's ``deliver_after``/``deliver_at`` makes, with its checks."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hedwig.client.publishing.deliver_at import delivery_header
from hedwig.errors import InvalidRequestError, UsageError
from hedwig.hub.serving.delays import DelayIndex, check_published
from hedwig.protocol import Message, encode_messages
from hedwig.protocol.messages import DELIVER_AT, DeliveryTimeError, deliver_at_header
from hedwig.protocol.messages.delivery_time import deliver_at_of, deliver_times, may_hold
from hedwig.settings import QueueSettings

NOW = 1_700_000_000_000


def _spilled_log(index: DelayIndex, log: dict[int, int], now: int, next_seq: int) -> int:
    """Run one whole pass as delivery does, over ``log`` (seq -> due of each message not
    delivered yet); the chunks read."""
    chunks = 0
    while (span := index.rescan(now, next_seq)) is not None:
        first, last = span
        through = min(last, first + 1)  # two messages a chunk
        index.scanned(through, [(s, log[s]) for s in range(first, through + 1) if s in log])
        chunks += 1
    return chunks


def test_due_messages_come_out_when_due_soonest_first() -> None:
    index = DelayIndex(capacity=10)
    index.add(5, NOW + 300)
    index.add(2, NOW + 100)
    index.add(9, NOW + 200)
    assert index.next_due(NOW) == NOW + 100
    assert index.take_due(NOW + 99, 10) == []
    assert index.take_due(NOW + 250, 10) == [2, 9]
    assert index.next_due(NOW + 250) == NOW + 300 and len(index) == 1
    index.add(5, NOW + 999)  # already held: kept as it was
    assert index.take_due(NOW + 300, 1) == [5]
    assert index.next_due(NOW + 300) is None and not index.spilling


def test_take_due_stops_at_its_limit_and_keeps_the_rest() -> None:
    index = DelayIndex(capacity=10)
    for seq in range(1, 6):
        index.add(seq, NOW + seq)
    assert index.take_due(NOW + 10, 2) == [1, 2]
    assert index.take_due(NOW + 10, 10) == [3, 4, 5]


def test_a_full_index_keeps_the_soonest_and_spills_the_latest() -> None:
    index = DelayIndex(capacity=3)
    for seq, due in ((1, 500), (2, 400), (3, 300)):
        index.add(seq, NOW + due)
    index.add(4, NOW + 100)  # sooner than the latest (1): 1 is spilled
    index.add(5, NOW + 900)  # later than all: spilled itself
    assert len(index) == 3 and 1 not in index and 5 not in index and 4 in index
    assert index.spilled == 2 and index.spilling
    # Full, and nothing spilled is due before what it holds: no pass is of use yet.
    assert index.rescan(NOW, 6) is None
    assert index.take_due(NOW + 400, 10) == [2, 3, 4]
    assert len(index) == 0


def test_a_drained_index_finds_its_spilled_messages_again_in_one_pass() -> None:
    index = DelayIndex(capacity=4)
    log = {seq: NOW + 1000 - seq for seq in range(1, 11)}  # the later, the sooner due
    for seq, due in log.items():
        index.add(seq, due)
    assert sorted(index.take_due(NOW + 1000, 100)) == [7, 8, 9, 10]
    for seq in (7, 8, 9, 10):
        del log[seq]
    # Drained: a pass from the lowest spilled message up to where delivery reached.
    assert index.rescan(NOW, 11) == (1, 10)
    assert _spilled_log(index, log, NOW, 11) >= 1
    assert index.passes == 1
    assert index.take_due(NOW + 1000, 100) == [3, 4, 5, 6]
    for seq in (3, 4, 5, 6):
        del log[seq]
    _spilled_log(index, log, NOW, 11)
    assert index.take_due(NOW + 1000, 100) == [1, 2]
    assert not index.spilling and index.rescan(NOW, 11) is None


def test_a_spilled_message_falling_due_starts_a_pass_while_later_ones_are_held() -> None:
    index = DelayIndex(capacity=2)
    index.add(1, NOW + 100)
    index.add(2, NOW + 200)
    index.add(3, NOW + 300)  # spilled
    assert index.take_due(NOW + 150, 10) == [1]
    index.add(4, NOW + 5000)  # fills the index again, due after the spilled one
    assert index.next_due(NOW + 150) == NOW + 200
    assert index.take_due(NOW + 200, 10) == [2]
    index.add(5, NOW + 6000)
    assert 3 not in index and len(index) == 2
    # 3 is due at +300 and the index holds ones due later: delivery is woken for it.
    assert index.next_due(NOW + 200) == NOW + 300
    assert index.rescan(NOW + 250, 6) is None  # not due yet, index not drained
    _spilled_log(index, {3: NOW + 300}, NOW + 300, 6)
    assert 3 in index and 5 not in index  # the latest went out to make room
    assert index.take_due(NOW + 300, 10) == [3]


def test_spills_during_a_pass_behind_it_are_left_for_the_next_one() -> None:
    index = DelayIndex(capacity=1)
    index.add(1, NOW + 10)
    index.add(2, NOW + 20)  # spilled
    assert index.take_due(NOW + 10, 10) == [1]
    assert index.rescan(NOW + 10, 3) == (2, 2)
    index.add(5, NOW + 5)  # delivery reached 5 meanwhile; it is sooner: held
    index.scanned(2, [(2, NOW + 20)])  # the pass meets 2: spilled again, behind it
    assert index.spilling  # 2 waits for the next pass
    assert index.take_due(NOW + 5, 10) == [5]
    assert index.rescan(NOW + 5, 6) == (2, 5)


def test_clear_forgets_everything() -> None:
    index = DelayIndex(capacity=1)
    index.add(1, NOW)
    index.add(2, NOW + 1)
    index.clear()
    assert len(index) == 0 and not index.spilling and index.next_due(NOW) is None


def test_the_header_round_trips_and_is_found_cheaply() -> None:
    name, value = deliver_at_header(NOW)
    assert name == DELIVER_AT and value == NOW.to_bytes(8, "big")
    assert deliver_at_of([("a", b"x"), (name, value)]) == NOW
    _count, payload = encode_messages(
        [
            Message(value=b"now"),
            Message(value=b"later", headers=((name, value),)),
            Message(value=b"keyed", key=b"k", headers=(("other", b"1"), (name, value))),
        ]
    )
    assert may_hold(payload) and not may_hold(encode_messages([Message(value=b"x")])[1])
    assert deliver_times(payload, 10) == [(11, NOW), (12, NOW)]


@pytest.mark.parametrize(
    "value", [b"", b"1234567", b"123456789", (-5).to_bytes(8, "big", signed=True)]
)
def test_a_malformed_header_is_refused_at_publish_and_ignored_in_the_log(value: bytes) -> None:
    _, payload = encode_messages([Message(value=b"x", headers=((DELIVER_AT, value),))])
    with pytest.raises(DeliveryTimeError):
        deliver_times(payload, 1, strict=True)
    assert deliver_times(payload, 1) == []
    with pytest.raises(InvalidRequestError, match=DELIVER_AT):
        check_published(payload, NOW, QueueSettings())


def test_a_time_too_far_ahead_is_refused_at_publish() -> None:
    settings = QueueSettings(max_deliver_delay_s=60.0)
    ok = encode_messages([Message(value=b"x", headers=(deliver_at_header(NOW + 60_000),))])[1]
    check_published(ok, NOW, settings)
    far = encode_messages([Message(value=b"x", headers=(deliver_at_header(NOW + 60_001),))])[1]
    with pytest.raises(InvalidRequestError, match="at most 60 s ahead"):
        check_published(far, NOW, settings)


def test_a_publishers_delay_becomes_the_header() -> None:
    assert delivery_header(deliver_after=1.5, deliver_at=None, now_ms=NOW) == deliver_at_header(
        NOW + 1500
    )
    when = datetime.fromtimestamp(NOW / 1000, UTC) + timedelta(seconds=2)
    assert delivery_header(deliver_after=None, deliver_at=when, now_ms=0)[1] == (
        NOW + 2000
    ).to_bytes(8, "big")
    assert delivery_header(deliver_after=None, deliver_at=NOW / 1000, now_ms=0) == (
        deliver_at_header(NOW)
    )
    for bad in (
        {"deliver_after": -1.0},
        {"deliver_after": float("nan")},
        {"deliver_after": True},
        {"deliver_at": -3.0},
        {"deliver_at": datetime(2030, 1, 1)},  # naive: whose midnight?
        {"deliver_after": 1.0, "deliver_at": 5.0},
    ):
        kw = {"deliver_after": None, "deliver_at": None, **bad}
        with pytest.raises(UsageError):
            delivery_header(now_ms=NOW, **kw)  # type: ignore[arg-type]


@settings(max_examples=300, deadline=None)
@given(
    capacity=st.integers(1, 6),
    dues=st.lists(st.integers(0, 50), min_size=1, max_size=40),
    steps=st.lists(st.integers(0, 3), min_size=1, max_size=80),
    room=st.integers(1, 5),
)
def test_every_delayed_message_comes_out_once_and_never_early(
    capacity: int, dues: list[int], steps: list[int], room: int
) -> None:
    """Delivery as ``hedwig.hub.serving.giving`` drives the index, on a log of delayed
    messages (seq i+1 due at NOW + dues[i]), the clock moving by the steps: each round a pass
    reads a chunk, what is due comes out (``room`` at most), and the front reads one more
    message. Whatever the bound, every message comes out exactly once, never before its time,
    and all do."""
    index = DelayIndex(capacity=capacity)
    log = {i + 1: NOW + due for i, due in enumerate(dues)}
    out: dict[int, int] = {}
    now = NOW
    next_seq = 1
    rounds = 0
    while len(out) < len(log):
        rounds += 1
        assert rounds < 10_000, "delivery never finished"
        now += steps[rounds % len(steps)] + (rounds % 7 == 0)  # time passes, if slowly
        span = index.rescan(now, next_seq)
        if span is not None:
            first, last = span
            through = min(last, first + 2)
            index.scanned(through, [(s, log[s]) for s in range(first, through + 1) if s not in out])
        for seq in index.take_due(now, room):
            assert seq not in out, f"{seq} came out twice"
            assert now >= log[seq], f"{seq} came out early"
            out[seq] = now
        if next_seq <= len(log):
            index.add(next_seq, log[next_seq])
            next_seq += 1
        assert len(index) <= capacity
    assert set(out) == set(log) and len(index) == 0
