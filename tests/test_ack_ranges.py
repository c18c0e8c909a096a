"""The acknowledgement state of a subscription acknowledged message by message, against a
plain set of acknowledged sequence ids (hypothesis draws the acknowledgements)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from hedwig.hub.serving.acks import AckRanges
from hedwig.metadata.records.subscriptions import MAX_STORED_RANGES, SubscriptionState


def test_acking_after_the_mark_moves_it_over_the_ranges_it_touches() -> None:
    acks = AckRanges(10)
    acks.add(12, 13)
    acks.add(15, 15)
    assert acks.mark == 10 and acks.ranges() == ((12, 13), (15, 15))
    acks.add(11, 11)
    assert acks.mark == 13 and acks.ranges() == ((15, 15),)
    acks.add(14, 14)
    assert acks.mark == 15 and acks.ranges() == ()
    acks.add(3, 9)  # at or below the mark: nothing changes
    assert acks.mark == 15 and len(acks) == 0


def test_stored_ranges_are_bounded_and_nearest_the_mark() -> None:
    acks = AckRanges(0)
    for i in range(MAX_STORED_RANGES + 500):
        acks.add(2 * i + 2, 2 * i + 2)  # every other message: a range each
    assert len(acks) == MAX_STORED_RANGES + 500
    stored = acks.stored()
    assert len(stored) == MAX_STORED_RANGES and stored[0] == (2, 2)
    # What a record keeps is a valid record, and reads back as the same nearest ranges.
    SubscriptionState(acks.mark, acked=stored)
    assert AckRanges(acks.mark, stored).ranges() == stored


@settings(max_examples=150, deadline=None)
@given(
    st.integers(0, 5),
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 6)), max_size=40),
)
def test_ranges_agree_with_a_set(mark: int, adds: list[tuple[int, int]]) -> None:
    acks = AckRanges(mark)
    model = set(range(1, mark + 1))
    for first, length in adds:
        acks.add(first, first + length)
        model.update(range(max(first, 1), first + length + 1))
    expected_mark = 0
    while expected_mark + 1 in model:
        expected_mark += 1
    assert acks.mark == expected_mark
    for seq in range(1, 70):
        assert acks.is_acked(seq) == (seq in model)
        nxt = seq
        while nxt in model:
            nxt += 1
        assert acks.next_unacked(seq) == max(nxt, acks.mark + 1)
    assert acks.acked_between(3, 40) == len([s for s in model if 3 <= s <= 40])
    ranges = acks.ranges()
    for (_, a_end), (b_start, _) in itertools.pairwise(ranges):
        assert b_start >= a_end + 2  # apart, never touching
    SubscriptionState(acks.mark, acked=acks.stored())
