"""A subscription's record: what the subscriber asked for (``SubscriptionPreferences``,
rarely changed) and where it is (``SubscriptionState``, changed as it consumes), kept apart so
a store that can update one part leaves the other as stored.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import dump_object, load_object


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


@dataclass(frozen=True, slots=True)
class SubscriptionData:
    """A subscription's record. For a partial update, ``None`` parts are left as stored."""

    preferences: SubscriptionPreferences | None = None
    state: SubscriptionState | None = None
    # The principal that created it, whose it is (``hedwig.hub.front.owners``); None: none
    # recorded (anyone's with ``subscribe``), and in a partial update, left as stored.
    owner: str | None = None

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.preferences is not None:
            p = asdict(self.preferences)
            p["options"] = dict(self.preferences.options)
            d["preferences"] = p
        if self.state is not None:
            d["state"] = asdict(self.state)
        if self.owner is not None:
            d["owner"] = self.owner
        return dump_object(d)

    @classmethod
    def from_json(cls, raw: bytes) -> SubscriptionData:
        d = load_object(raw, "subscription")
        try:
            p = d.get("preferences")
            s = d.get("state")
            prefs = None
            if p is not None:
                p = dict(p)
                p["options"] = tuple(sorted(dict(p.get("options", {})).items()))
                prefs = SubscriptionPreferences(**p)
            owner = d.get("owner")
            if owner is not None and not isinstance(owner, str):
                raise ValueError(f"owner {owner!r} is not a name")
            return cls(prefs, SubscriptionState(**s) if s is not None else None, owner)
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt subscription: {exc}") from exc

    def merged_into(self, stored: SubscriptionData) -> SubscriptionData:
        """``stored`` with the parts this record sets replaced (a partial update)."""
        return SubscriptionData(
            self.preferences if self.preferences is not None else stored.preferences,
            self.state if self.state is not None else stored.state,
            self.owner if self.owner is not None else stored.owner,
        )
