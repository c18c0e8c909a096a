"""A subscription's record: what the subscriber asked for (``SubscriptionPreferences``,
rarely changed), where it is (``SubscriptionState``, changed as it consumes) and how it shares
and retries its messages (``DeliveryPolicy``, set when it is created), kept apart so a store
that can update one part leaves the others as stored.

The state of a subscription acknowledged message by message is its cumulative mark
(``consumed_seq``: everything up to it is acknowledged) plus ``acked``, the ranges of
messages acknowledged above the mark, and ``deliveries``, how often each unacknowledged
message was delivered (counted when it is delivered, so a consumer killed mid-message still
counts an attempt). Both are bounded in the record, whatever is in flight: at most
``MAX_STORED_RANGES`` of each, those nearest the mark, are kept. What is left out is
acknowledged (or counted) in memory only, so a failover delivers it again (or counts it from
the attempts kept): at least once still holds, and the record stays small.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.metadata.records.queueing import DeliveryPolicy
from hedwig.protocol.kinds import SubscriptionType

# Ranges of acknowledged messages (and runs of delivery counts) a record holds at most:
# about 40 KB of JSON, well inside a znode (1 MB) or an etcd value (1.5 MB).
MAX_STORED_RANGES = 1024


@dataclass(frozen=True, slots=True)
class SubscriptionPreferences:
    """What the subscriber asked for; rarely changes."""

    message_window: int = 0
    message_bound: int = 0
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class SubscriptionState:
    """Where the subscriber is; changes as it consumes."""

    consumed_seq: int = 0
    created_ms: int = 0
    # When a subscriber last attached or consumed (for subscription expiry; 0: unknown).
    last_active_ms: int = 0
    # Inclusive ranges ``(first, last)`` acknowledged above ``consumed_seq``, ascending and
    # apart (a gap of at least one unacknowledged message between two).
    acked: tuple[tuple[int, int], ...] = ()
    # Runs ``(first, last, count)`` of unacknowledged messages delivered ``count`` times.
    deliveries: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self) -> None:
        if len(self.acked) > MAX_STORED_RANGES or len(self.deliveries) > MAX_STORED_RANGES:
            raise UsageError(f"a subscription record holds at most {MAX_STORED_RANGES} ranges")
        floor = self.consumed_seq + 1
        for first, last in self.acked:
            if not floor <= first <= last:
                raise UsageError(f"acknowledged ranges out of order at ({first}, {last})")
            floor = last + 2
        floor = self.consumed_seq + 1
        for first, last, count in self.deliveries:
            if not floor <= first <= last or count < 1:
                raise UsageError(f"delivery counts out of order at ({first}, {last}, {count})")
            floor = last + 1


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """A subscription's record. For a partial update, ``None`` parts are left as stored; a
    record without a policy is an exclusive subscription (every record from before types)."""

    preferences: SubscriptionPreferences | None = None
    state: SubscriptionState | None = None
    policy: DeliveryPolicy | None = None
    # The principal that created it, whose it is (``hedwig.hub.front.owners``); None: none
    # recorded (anyone's with ``subscribe``), and in a partial update, left as stored.
    owner: str | None = None

    @property
    def type(self) -> SubscriptionType:
        return SubscriptionType.EXCLUSIVE if self.policy is None else self.policy.type

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.preferences is not None:
            p = asdict(self.preferences)
            p["options"] = dict(self.preferences.options)
            d["preferences"] = p
        if self.state is not None:
            s = asdict(self.state)
            for part in ("acked", "deliveries"):  # absent while empty: records stay as they were
                if not s[part]:
                    del s[part]
            d["state"] = s
        if self.policy is not None:
            pol = asdict(self.policy)
            pol["type"] = self.policy.type.label
            d["policy"] = pol
        if self.owner is not None:
            d["owner"] = self.owner
        return dump_object(d)

    @classmethod
    def from_json(cls, raw: bytes) -> SubscriptionData:
        d = load_object(raw, "subscription")
        try:
            p = d.get("preferences")
            s = d.get("state")
            pol = d.get("policy")
            prefs = None
            if p is not None:
                p = dict(p)
                p["options"] = tuple(sorted(dict(p.get("options", {})).items()))
                prefs = SubscriptionPreferences(**p)
            state = None
            if s is not None:
                s = dict(s)
                s["acked"] = tuple((int(a), int(b)) for a, b in s.get("acked", ()))
                s["deliveries"] = tuple(
                    (int(a), int(b), int(c)) for a, b, c in s.get("deliveries", ())
                )
                state = SubscriptionState(**s)
            policy = None
            if pol is not None:
                pol = dict(pol)
                pol["type"] = SubscriptionType.parse(str(pol.get("type", "exclusive")))
                pol["backoff_ms"] = tuple(int(x) for x in pol.get("backoff_ms", ()))
                policy = DeliveryPolicy(**pol)
            owner = d.get("owner")
            if owner is not None and not isinstance(owner, str):
                raise ValueError(f"owner {owner!r} is not a name")
            return cls(prefs, state, policy, owner)
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt subscription: {exc}") from exc

    def merged_into(self, stored: SubscriptionData) -> SubscriptionData:
        """``stored`` with the parts this record sets replaced (a partial update)."""
        return SubscriptionData(
            self.preferences if self.preferences is not None else stored.preferences,
            self.state if self.state is not None else stored.state,
            self.policy if self.policy is not None else stored.policy,
            self.owner if self.owner is not None else stored.owner,
        )
