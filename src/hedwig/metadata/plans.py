"""A topic's plan: which hubs serve it and how, as stored under ``topics/<T>/plan``.

Most topics have no plan record: one owning hub serves everything (``single``). A topic too hot
for one hub gets a plan (the edge-broker design's channel replication, named here by purpose):

- ``fan-out`` (very many subscribers): the owner stays the topic's only writer and sequencer;
  the plan's ``hubs`` are *delivery hubs* that tail the owner's confirmed log and deliver to
  the subscribers sent to them. Each subscriber is served by exactly one of them, chosen by
  rendezvous hashing of its id (``delivery_hub``): stable while the set is unchanged, and
  adding or removing a hub moves only the subscribers that hash to it.
- ``ingest`` (very many publishers): lanes, each a log with its own owner. Named so records
  stay readable, not implemented yet: a plan in this mode is refused when built.

The plan is changed only by compare-and-set on the record's version (``TopicPlanManager``), so
two tools or balancers cannot both believe their change won. ``generation`` counts the changes
for people and metrics; the store's version is what the compare-and-set checks.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from hedwig.errors import MetadataError
from hedwig.metadata.records import _dump, _load

# More delivery hubs than this is a mistake, not a plan (each one tails the whole topic).
MAX_PLAN_HUBS = 64


class PlanMode(str, Enum):
    SINGLE = "single"
    FAN_OUT = "fan-out"
    INGEST = "ingest"


@dataclass(frozen=True, slots=True)
class TopicPlan:
    mode: PlanMode = PlanMode.SINGLE
    # fan-out: the delivery hubs' client addresses, sorted (the owner may be one of them).
    hubs: tuple[str, ...] = ()
    generation: int = 0
    # Why the plan was set (``hedwig topic mode``, the balancer's explanation), for people.
    reason: str = ""
    changed_ms: int = 0

    def __post_init__(self) -> None:
        if self.mode is PlanMode.INGEST:
            raise MetadataError(
                "ingest lanes are not implemented yet: a topic can be single or fan-out"
            )
        if self.mode is PlanMode.SINGLE and self.hubs:
            raise MetadataError("a single-hub plan names no delivery hubs")
        if self.mode is PlanMode.FAN_OUT:
            if not self.hubs:
                raise MetadataError("a fan-out plan needs at least one delivery hub")
            if len(self.hubs) > MAX_PLAN_HUBS:
                raise MetadataError(f"a plan names at most {MAX_PLAN_HUBS} hubs")
            if tuple(sorted(set(self.hubs))) != self.hubs:
                raise MetadataError("a plan's hubs must be distinct and sorted")
            if any(not h for h in self.hubs):
                raise MetadataError("a plan's hub address is empty")
        if self.generation < 0:
            raise MetadataError("a plan's generation is not negative")

    @classmethod
    def fan_out(
        cls, hubs: list[str] | tuple[str, ...], *, generation: int, reason: str = "", at_ms: int = 0
    ) -> TopicPlan:
        return cls(PlanMode.FAN_OUT, tuple(sorted(set(hubs))), generation, reason, at_ms)

    def delivery_hub(self, subscriber: str, alive: Collection[str] | None = None) -> str | None:
        """The hub that serves ``subscriber`` (``None``: the owner, as for a single topic,
        or when none of the plan's hubs is in ``alive``).

        Rendezvous (highest random weight) hashing: every hub scores the subscriber and the
        best score wins, so a subscriber's hub changes only when that hub leaves or a new hub
        outscores it. SHA-256 rather than ``hash()`` because every hub and client must agree.
        """
        if self.mode is not PlanMode.FAN_OUT:
            return None
        hubs = self.hubs if alive is None else [h for h in self.hubs if h in alive]
        if not hubs:
            return None
        return max(hubs, key=lambda hub: _score(hub, subscriber))

    def to_json(self) -> bytes:
        return _dump(
            {
                "mode": self.mode.value,
                "hubs": list(self.hubs),
                "generation": self.generation,
                "reason": self.reason,
                "changed_ms": self.changed_ms,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> TopicPlan:
        d = _load(raw, "plan")
        try:
            hubs = d.get("hubs", [])
            if not isinstance(hubs, list):
                raise TypeError("hubs is not a list")
            return cls(
                PlanMode(d.get("mode", "single")),
                tuple(str(h) for h in hubs),
                int(d.get("generation", 0)),
                str(d.get("reason", "")),
                int(d.get("changed_ms", 0)),
            )
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt plan record: {exc}") from exc


def _score(hub: str, subscriber: str) -> bytes:
    return hashlib.sha256(f"{hub}\0{subscriber}".encode()).digest()
