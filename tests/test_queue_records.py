"""A subscription's type, delivery policy and acknowledgement state as records: built only
when they make sense, and read back from their JSON as written."""

from __future__ import annotations

import pytest

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.records import (
    DeliveryPolicy,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    SubscriptionType,
)
from hedwig.metadata.records.queueing import parse_duration_ms
from hedwig.metadata.records.subscriptions import MAX_STORED_RANGES


def test_policy_round_trips_through_json() -> None:
    policy = DeliveryPolicy(
        SubscriptionType.KEY_SHARED,
        ack_timeout_ms=1_000,
        max_deliveries=5,
        backoff_ms=(1_000, 10_000, 60_000),
        dead_letter="orders-dlq",
        delay_ms=250,
    )
    state = SubscriptionState(7, 1, 2, acked=((9, 9),), deliveries=((8, 8, 3),))
    data = SubscriptionData(SubscriptionPreferences(message_window=4), state, policy)
    assert SubscriptionData.from_json(data.to_json()) == data


def test_a_record_without_the_new_parts_is_written_as_before() -> None:
    data = SubscriptionData(SubscriptionPreferences(), SubscriptionState(3, 1, 2))
    assert data.to_json() == (
        b'{"preferences":{"message_bound":0,"message_window":0,"options":{}},'
        b'"state":{"consumed_seq":3,"created_ms":1,"last_active_ms":2}}'
    )
    assert SubscriptionData.from_json(data.to_json()).type is SubscriptionType.EXCLUSIVE


def test_backoff_steps_repeat_the_last() -> None:
    policy = DeliveryPolicy(SubscriptionType.SHARED, backoff_ms=(100, 1_000))
    assert [policy.backoff_for(n) for n in (1, 2, 3, 9)] == [100, 1_000, 1_000, 1_000]
    assert DeliveryPolicy(SubscriptionType.SHARED).backoff_for(4) == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"type": SubscriptionType.SHARED, "ack_timeout_ms": -1},
        {"type": SubscriptionType.SHARED, "ack_timeout_ms": 3_600_001},
        {"type": SubscriptionType.SHARED, "max_deliveries": 1_001},
        {"type": SubscriptionType.SHARED, "backoff_ms": (1,) * 33},
        {"type": SubscriptionType.SHARED, "dead_letter": "dlq"},  # after how many?
        {"type": SubscriptionType.SHARED, "dead_letter": "", "max_deliveries": 2},
        {"type": SubscriptionType.EXCLUSIVE, "max_deliveries": 3},  # cumulative: no retries
        {"type": "shared"},
    ],
)
def test_a_policy_that_cannot_be_applied_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(UsageError):
        DeliveryPolicy(**kwargs)  # type: ignore[arg-type]


def test_ack_state_must_be_ordered_and_bounded() -> None:
    with pytest.raises(UsageError):
        SubscriptionState(10, acked=((10, 12),))  # at or below the mark
    with pytest.raises(UsageError):
        SubscriptionState(10, acked=((12, 14), (15, 16)))  # touching: one range
    with pytest.raises(UsageError):
        SubscriptionState(10, deliveries=((11, 11, 0),))
    with pytest.raises(UsageError):
        SubscriptionState(
            0, acked=tuple((3 * i + 1, 3 * i + 1) for i in range(MAX_STORED_RANGES + 1))
        )


def test_a_corrupt_policy_is_a_metadata_error() -> None:
    with pytest.raises(MetadataError):
        SubscriptionData.from_json(b'{"policy":{"type":"fanciful"}}')
    with pytest.raises(MetadataError):
        SubscriptionData.from_json(b'{"state":{"consumed_seq":5,"acked":[[3,4]]}}')


def test_types_and_durations_parse_as_the_command_line_says_them() -> None:
    assert SubscriptionType.parse("key_shared") is SubscriptionType.KEY_SHARED
    assert SubscriptionType.parse("Shared") is SubscriptionType.SHARED
    with pytest.raises(UsageError, match="one of exclusive"):
        SubscriptionType.parse("round-robin")
    assert [parse_duration_ms(t) for t in ("250ms", "10s", "1.5s", "5m", "1h", "42")] == [
        250,
        10_000,
        1_500,
        300_000,
        3_600_000,
        42,
    ]
    with pytest.raises(UsageError):
        parse_duration_ms("soon")
