"""A topic's plan: which hubs serve it and how, as stored under ``topics/<T>/plan``.

Most topics have no plan record: one owning hub serves everything (``single``). A topic too hot
for one hub gets a plan (the edge-broker design's channel replication, named here by purpose):

- ``fan-out`` (very many subscribers): the owner stays the topic's only writer and sequencer;
  the plan's ``hubs`` are *delivery hubs* that tail the owner's confirmed log and deliver to
  the subscribers sent to them. Each subscriber is served by exactly one of them, chosen by
  rendezvous hashing of its id (``delivery_hub``): stable while the set is unchanged, and
  adding or removing a hub moves only the subscribers that hash to it.
- ``ingest`` (very many publishers, or more publishing than one hub takes): the topic is
  served by *lanes*, each a log with its own owner, ledgers and sequence. Lane 0 is the topic
  itself; lane ``i`` is the topic ``hedwig.protocol.names.lane_name(topic, i)``, so ownership,
  storage, moves, subscriptions and retention work for a lane as for any topic. A publisher
  goes to one open lane, chosen by rendezvous hashing of its id (``lane_for``), so its
  messages stay in order and deduplicated; there is no order across lanes. Subscribers read
  every lane with a consume mark per lane.

A lane taken out of service is *sealed*, never removed at once: it takes no more publishes
(its publishers are sent to the open lanes) and stays listed, in any mode, until its readers
have consumed it (``drop_lanes``). Lanes are numbered once: a sealed lane is never reopened,
and a new lane gets a number never used, so a subscriber that finished a lane never finds it
writable again. Each lane may name the hub chosen to own it first (``Lane.hub``): placement
sends an unowned lane there, which is how lanes start on different hubs.

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
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.protocol.names import MAX_LANE

# Lanes are chosen by a publisher's id without its epoch suffix (declared with the suffix).
from hedwig.protocol.names import publisher_base as publisher_base

# More delivery hubs than this is a mistake, not a plan (each one tails the whole topic).
MAX_PLAN_HUBS = 64


class PlanMode(str, Enum):
    SINGLE = "single"
    FAN_OUT = "fan-out"
    INGEST = "ingest"


@dataclass(frozen=True, slots=True)
class Lane:
    """One lane of an ingest topic (lane 0: the topic itself)."""

    index: int
    # The hub chosen to own the lane first ("": wherever placement puts it).
    hub: str = ""
    sealed: bool = False


@dataclass(frozen=True, slots=True)
class TopicPlan:
    mode: PlanMode = PlanMode.SINGLE
    # fan-out: the delivery hubs' client addresses, sorted (the owner may be one of them).
    hubs: tuple[str, ...] = ()
    generation: int = 0
    # Why the plan was set (``hedwig topic mode``, the balancer's explanation), for people.
    reason: str = ""
    changed_ms: int = 0
    # ingest: every lane, by index, lane 0 first and open; other modes: sealed lanes that
    # readers have not finished yet.
    lanes: tuple[Lane, ...] = ()

    def __post_init__(self) -> None:
        self._check_lanes()
        if self.mode is not PlanMode.FAN_OUT and self.hubs:
            raise MetadataError(f"a {self.mode.value} plan names no delivery hubs")
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

    def _check_lanes(self) -> None:
        indexes = [lane.index for lane in self.lanes]
        if indexes != sorted(set(indexes)):
            raise MetadataError("a plan's lanes must be distinct and in order")
        if any(not 0 <= i <= MAX_LANE for i in indexes):
            raise MetadataError(f"a lane's index is 0 to {MAX_LANE}")
        if self.mode is PlanMode.INGEST:
            if not self.lanes or self.lanes[0].index != 0 or self.lanes[0].sealed:
                raise MetadataError("an ingest plan's first lane is lane 0, open")
        elif any(not lane.sealed or lane.index == 0 for lane in self.lanes):
            raise MetadataError(f"a {self.mode.value} plan lists only sealed lanes past lane 0")

    @property
    def open_lanes(self) -> tuple[int, ...]:
        """The lanes publishers are sent to (``(0,)``: the topic alone)."""
        if self.mode is not PlanMode.INGEST:
            return (0,)
        return tuple(lane.index for lane in self.lanes if not lane.sealed)

    @property
    def readable_lanes(self) -> tuple[int, ...]:
        """Every lane a subscriber reads: the open ones and the sealed ones still kept."""
        return tuple(sorted({0, *(lane.index for lane in self.lanes)}))

    @property
    def serving(self) -> int:
        """How many hubs' worth of the topic there is: delivery hubs or open lanes."""
        if self.mode is PlanMode.FAN_OUT:
            return len(self.hubs)
        return len(self.open_lanes)

    def lane(self, index: int) -> Lane | None:
        for lane in self.lanes:
            if lane.index == index:
                return lane
        return None

    def lane_for(self, publisher: str) -> int:
        """The open lane that takes ``publisher``'s messages (rendezvous hashing, as for
        delivery hubs: adding a lane moves only the publishers it wins)."""
        lanes = self.open_lanes
        if len(lanes) == 1:
            return lanes[0]
        base = publisher_base(publisher)
        return max(lanes, key=lambda index: _score(str(index), base))

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
        record: dict[str, object] = {
            "mode": self.mode.value,
            "hubs": list(self.hubs),
            "generation": self.generation,
            "reason": self.reason,
            "changed_ms": self.changed_ms,
        }
        if self.lanes:
            record["lanes"] = [
                {"index": lane.index, "hub": lane.hub, "sealed": lane.sealed} for lane in self.lanes
            ]
        return dump_object(record)

    @classmethod
    def from_json(cls, raw: bytes) -> TopicPlan:
        d = load_object(raw, "plan")
        try:
            hubs = d.get("hubs", [])
            lanes = d.get("lanes", [])
            if not isinstance(hubs, list) or not isinstance(lanes, list):
                raise TypeError("hubs or lanes is not a list")
            return cls(
                PlanMode(d.get("mode", "single")),
                tuple(str(h) for h in hubs),
                int(d.get("generation", 0)),
                str(d.get("reason", "")),
                int(d.get("changed_ms", 0)),
                tuple(
                    Lane(int(x["index"]), str(x.get("hub", "")), bool(x.get("sealed", False)))
                    for x in lanes
                ),
            )
        except (TypeError, ValueError, KeyError) as exc:
            raise MetadataError(f"corrupt plan record: {exc}") from exc


def _score(hub: str, subscriber: str) -> bytes:
    return hashlib.sha256(f"{hub}\0{subscriber}".encode()).digest()
