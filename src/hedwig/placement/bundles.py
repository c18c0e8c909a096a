"""Where bundles go, which a joining hub takes, and which are split or merged: pure policies.

Every function here takes a snapshot (the bundle map, owners, alive hubs, per-bundle load)
and returns decisions; the hubs and the operator apply them through the store's
compare-and-set records, so two deciders that disagree for a moment cannot both win.

**Placement is consistent hashing** (the edge-broker design's default): an unowned bundle
goes to its *ring place*, the alive hub that scores highest for it (``ring_place``:
rendezvous hashing, BLAKE2b of hub and bundle, as ``TopicPlan.delivery_hub`` does for
subscribers). Every hub that sees the same alive hubs gives the same answer without asking
anyone; adding a hub changes the place of exactly the bundles it now wins (about one in
``N``), removing one only of the bundles it held. Rendezvous rather than a ring of points:
no virtual nodes to tune, and the spread is even at any number of hubs.

**A joining hub takes bundles from the ring** (``joining_moves``): a hub owning fewer than
its share of the region's owned bundles (``floor(bundles / hubs)``) takes, from hubs owning
more than that share, the bundles whose ring place it is, until it has its share (and the
giver keeps its own). Only hubs short of their share pull, and only from hubs above it, so a
bundle the load balancer moved off its ring place is not pulled back unless its place is
short of bundles: the ring is the default, and the balancer's moves by load stay where it
put them. A hub that owns *no* bundle (one that has just joined) takes the rest of its share
from the fullest hubs when the ring places too few of the owned bundles on it: with few bundles
owned the ring can leave it nothing at all (8 owned bundles over 4 hubs: about one time in
six), and a hub owning none holds nothing the balancer put anywhere. Every move brings a hub
short of its share one closer and leaves its giver at its share or above, so moves stop once
no hub is short. Moves per cycle are capped, as the balancer's are.

**Split and merge** (``split_points``, ``plan_merges``): a bundle splits when it holds more
topics than ``BundleLimits.max_topics`` or carries more than ``max_msg_rate`` or
``max_byte_rate`` (Pulsar's thresholds: 1,000 topics, 30,000 msg/s, 100 MB/s). Over its
topics, or over a rate spread over several topics, it splits at its middle. Over a rate of
which one topic carries most (``hot_topic_share``), it is cut around that topic's hash, so
the topic sits alone in a bundle one hash wide and can move by itself; a bundle one hash
wide is never split again (Pulsar's bundle that split forever around one hot topic). Two
neighbouring bundles of one owner merge back when together they stay under ``merge_share`` of
every limit (hysteresis: far below where the merged bundle would split again), neither split
lately (the caller's cooldown).
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.metadata.bundles import Bundle, BundleMap, topic_hash

# Bundles a joining hub takes at most per balancing cycle (each a hand-off of every topic of
# the bundle in use; a minute apart, a fifth of a 300-bundle hub's share a cycle).
JOIN_MOVES_PER_CYCLE = 20


def _score(hub: str, bundle: str) -> bytes:
    return hashlib.blake2b(f"{hub}\0{bundle}".encode(), digest_size=8).digest()


def ring_place(bundle: str, hubs: Collection[str]) -> str | None:
    """The hub among ``hubs`` (client addresses) that ``bundle`` belongs to by consistent
    hashing; ``None`` if there is none."""
    if not hubs:
        return None
    return max(hubs, key=lambda hub: _score(hub, bundle))


@dataclass(frozen=True, slots=True)
class BundleMove:
    """Hand ``bundle`` from ``source`` to ``destination`` (a named destination: the moved
    bundle's clients are told where to go)."""

    bundle: str
    source: str
    destination: str
    reason: str


def joining_moves(
    owners: Mapping[str, str],
    alive: Collection[str],
    *,
    limit: int = JOIN_MOVES_PER_CYCLE,
) -> list[BundleMove]:
    """The bundles hubs short of their share take from the ring (see the module's rules).

    ``owners``: each owned bundle's owner's address; ``alive``: the hubs that may own
    bundles (drained hubs left out). Bundles whose owner is not alive are not moved here:
    they are unowned once its session ends, and placed by ``ring_place`` then."""
    hubs = sorted(alive)
    if len(hubs) < 2 or limit <= 0:
        return []
    owned = {b: h for b, h in owners.items() if h in alive}
    count = Counter(owned.values())
    empty = [h for h in hubs if count[h] == 0]
    low = len(owned) // len(hubs)
    moves: list[BundleMove] = []

    def move(bundle: str, source: str, place: str) -> None:
        owned[bundle] = place
        count[source] -= 1
        count[place] += 1
        moves.append(
            BundleMove(
                bundle,
                source,
                place,
                f"{place} owns {count[place] - 1} bundles, under its share of {low}; "
                f"{source} owns {count[source] + 1}, over it",
            )
        )

    for bundle in sorted(owned):
        if len(moves) >= limit:
            return moves
        source = owned[bundle]
        if count[source] <= low:
            continue
        place = ring_place(bundle, hubs)
        if place is None or place == source or count[place] >= low:
            continue
        move(bundle, source, place)
    # An empty hub the ring gave less than its share: from the fullest hubs, each giving the
    # bundle that scores highest for the taker (deterministic: every hub decides alike).
    for hub in empty:
        while count[hub] < low and len(moves) < limit:
            source = max(hubs, key=lambda h: (count[h], h))
            if count[source] <= low:
                break
            bundle = max((b for b, h in owned.items() if h == source), key=lambda b: _score(hub, b))
            move(bundle, source, hub)
    return moves


@dataclass(frozen=True, slots=True)
class BundleLimits:
    """When a bundle splits and when two merge (see the module's rules)."""

    # Topics a bundle holds at most: a take-over of a bundle loads its topics in use, and a
    # move hands each over; Pulsar's default threshold.
    max_topics: int = 1_000
    # Messages a second in plus out a bundle carries at most (Pulsar's 30,000).
    max_msg_rate: float = 30_000.0
    # Bytes a second in plus out (Pulsar's 100 MB/s).
    max_byte_rate: float = 100e6
    # A bundle over a rate limit of which one topic carries at least this share is cut
    # around that topic: splitting it in the middle would leave the topic as hot as before.
    hot_topic_share: float = 0.5
    # Neighbours merge when together under this share of every limit: a quarter, so that
    # the merged bundle is far from splitting again (hysteresis).
    merge_share: float = 0.25

    def __post_init__(self) -> None:
        if self.max_topics < 2 or self.max_msg_rate <= 0 or self.max_byte_rate <= 0:
            raise UsageError("bundle limits: at least 2 topics and rates above 0")
        if not 0 < self.hot_topic_share <= 1 or not 0 < self.merge_share < 0.5:
            raise UsageError("bundle limits: hot_topic_share in (0, 1], merge_share in (0, 0.5)")


@dataclass(frozen=True, slots=True)
class BundleLoad:
    """What a bundle holds and carries, as its owner reports it."""

    bundle: Bundle
    topics: int
    msg_rate: float = 0.0
    byte_rate: float = 0.0
    # The bundle's hottest topic and its message rate, if it carries any.
    hottest: tuple[str, float] | None = None


def split_points(load: BundleLoad, limits: BundleLimits) -> tuple[int, ...]:
    """Where to cut ``load.bundle`` (``()``: leave it whole)."""
    b = load.bundle
    if b.width < 2:
        return ()  # one hash wide: one topic (or its collisions), never split again
    over_rate = load.msg_rate > limits.max_msg_rate or load.byte_rate > limits.max_byte_rate
    if over_rate and load.hottest is not None and load.msg_rate > 0:
        topic, rate = load.hottest
        if rate / load.msg_rate >= limits.hot_topic_share:
            h = topic_hash(topic)
            if not b.start <= h < b.end:
                raise UsageError(f"topic {topic!r} is not in bundle {b.name}")
            return tuple(p for p in (h, h + 1) if b.start < p < b.end)
    if over_rate or load.topics > limits.max_topics:
        return (b.start + b.width // 2,)
    return ()


def apply_splits(bundles: BundleMap, bundle: Bundle, points: Sequence[int]) -> BundleMap:
    """``bundles`` with ``bundle`` cut at every one of ``points`` (each a generation)."""
    out = bundles
    current = bundle
    for point in sorted(points):
        out = out.split(current, point)
        current = Bundle(point, current.end)
    return out


def _cold(loads: Sequence[BundleLoad], limits: BundleLimits) -> bool:
    share = limits.merge_share
    return (
        sum(x.topics for x in loads) < limits.max_topics * share
        and sum(x.msg_rate for x in loads) < limits.max_msg_rate * share
        and sum(x.byte_rate for x in loads) < limits.max_byte_rate * share
    )


def plan_merges(
    bundles: BundleMap,
    loads: Mapping[str, BundleLoad],
    owners: Mapping[str, str],
    limits: BundleLimits,
    *,
    cooling: Collection[str] = (),
    limit: int = 1,
) -> list[tuple[Bundle, Bundle]]:
    """Neighbouring bundles to merge, left to right, none in two merges: both owned by one
    hub, both reported, neither in ``cooling`` (split or merged lately), and cold together.
    The whole space is never merged below one bundle."""
    out: list[tuple[Bundle, Bundle]] = []
    taken: set[str] = set()
    for left, right in itertools.pairwise(bundles.bundles):
        if len(out) >= limit:
            break
        names = (left.name, right.name)
        if any(n in taken or n in cooling or n not in loads for n in names):
            continue
        owner = owners.get(left.name)
        if owner is None or owners.get(right.name) != owner:
            continue
        if _cold([loads[left.name], loads[right.name]], limits):
            out.append((left, right))
            taken.update(names)
    return out


__all__ = [
    "JOIN_MOVES_PER_CYCLE",
    "BundleLimits",
    "BundleLoad",
    "BundleMove",
    "apply_splits",
    "joining_moves",
    "plan_merges",
    "ring_place",
    "split_points",
]
