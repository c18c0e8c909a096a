"""How a subscription shares its messages among consumers, and what it does with one that is
not acknowledged: the subscription's type and delivery policy, chosen when it is created and
kept in its record (``SubscriptionData.policy``).

Types (``hedwig.protocol.SubscriptionType``, kept by label), as Pulsar names them:

- ``exclusive``: one consumer, cumulative consumes (the default, and every record written
  before types existed reads as one);
- ``failover``: several consumers attach, the first one attached receives everything, and the
  next in attach order takes over at once when it leaves, from the first unacknowledged
  message;
- ``shared``: each message goes to whichever consumer has room; no order promise;
- ``key-shared``: the messages of one key go to one consumer while it is attached, in order.

The policy (``DeliveryPolicy``) is applied by the topic's owner, not by each client, so every
consumer of a subscription follows the same rules: an unacknowledged message is delivered
again after ``ack_timeout_ms``; a nacked or timed-out message waits the backoff step of its
delivery count (``backoff_ms``, the last step repeating) before it is delivered again; a
message delivered ``max_deliveries`` times is published to the ``dead_letter`` topic and
acknowledged here; ``delay_ms`` holds every message back from its publish time (a retry
subscription). Bounds are checked when a policy is built: a policy that cannot be applied is
refused where it is made, not found out at the owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.protocol.kinds import SubscriptionType

# A redelivery ladder longer than this says something other than a backoff.
MAX_BACKOFF_STEPS = 32
# One hour: a lock held longer hides a dead consumer (Kafka's share groups allow 1 s to 1 h).
MAX_ACK_TIMEOUT_MS = 3_600_000
# A week: delays past it are a scheduler's job, not a subscription's.
MAX_DELAY_MS = 7 * 24 * 3_600_000
# Kafka's share groups allow 2 to 10 deliveries; a dead-letter policy counts up to this.
MAX_DELIVERIES = 1_000


@dataclass(frozen=True, slots=True)
class DeliveryPolicy:
    """A subscription's type and what its owner does with unacknowledged messages."""

    type: SubscriptionType = SubscriptionType.EXCLUSIVE
    # Redelivered when not acknowledged this long after delivery (0: never, the consumer's
    # failure alone redelivers). 30 s, as Kafka's share-group lock and NATS's AckWait.
    ack_timeout_ms: int = 30_000
    # Dead-lettered (or, without a dead-letter topic, acknowledged and counted as dropped)
    # once delivered this many times (0: delivered until acknowledged).
    max_deliveries: int = 0
    # Waits before delivery number 2, 3, ... of a nacked or timed-out message; the last step
    # repeats. Empty: redelivered at once.
    backoff_ms: tuple[int, ...] = ()
    dead_letter: str | None = None
    # Every message held back this long after its publish time (a retry subscription).
    delay_ms: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.type, SubscriptionType):
            raise UsageError(f"subscription type must be a SubscriptionType, got {self.type!r}")
        _check_ms("ack timeout", self.ack_timeout_ms, MAX_ACK_TIMEOUT_MS)
        _check_ms("delay", self.delay_ms, MAX_DELAY_MS)
        if (
            not isinstance(self.max_deliveries, int)
            or not 0 <= self.max_deliveries <= MAX_DELIVERIES
        ):
            raise UsageError(
                f"max deliveries must be 0..{MAX_DELIVERIES}, got {self.max_deliveries!r}"
            )
        if len(self.backoff_ms) > MAX_BACKOFF_STEPS:
            raise UsageError(f"a backoff has at most {MAX_BACKOFF_STEPS} steps")
        for step in self.backoff_ms:
            _check_ms("backoff step", step, MAX_ACK_TIMEOUT_MS)
        if self.dead_letter is not None and not self.dead_letter:
            raise UsageError("a dead-letter topic needs a name")
        if self.dead_letter is not None and not self.max_deliveries:
            raise UsageError("a dead-letter topic needs max deliveries (after how many)")
        if self.type is SubscriptionType.EXCLUSIVE and (
            self.max_deliveries or self.backoff_ms or self.dead_letter or self.delay_ms
        ):
            raise UsageError(
                "an exclusive subscription consumes cumulatively: redelivery, dead letters "
                "and delays need a failover, shared or key-shared one"
            )

    def backoff_for(self, deliveries: int) -> int:
        """Milliseconds to wait before delivering again a message delivered ``deliveries``
        times."""
        steps = self.backoff_ms
        if not steps:
            return 0
        return steps[min(max(deliveries, 1), len(steps)) - 1]


def parse_duration_ms(text: str) -> int:
    """``250ms``, ``10s``, ``5m``, ``1h`` or a bare number of milliseconds."""
    t = text.strip().lower()
    for suffix, scale in (("ms", 1), ("s", 1000), ("m", 60_000), ("h", 3_600_000)):
        if t.endswith(suffix) and t[: -len(suffix)].replace(".", "", 1).isdigit():
            return round(float(t[: -len(suffix)]) * scale)
    if t.isdigit():
        return int(t)
    raise UsageError(f"not a duration: {text!r} (say 250ms, 10s, 5m or 1h)")


def _check_ms(what: str, value: object, most: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
        raise UsageError(f"{what} must be 0..{most} ms, got {value!r}")
