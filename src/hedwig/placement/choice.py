"""Choosing a hub for a topic nobody owns.

A hub calls ``choose_hub`` when a request names a topic with no owner (a new topic, or one
whose owner died or gave it up) and nothing else has decided where it goes
(``hedwig.hub.choices``: a placement still held, a lane's hub, or, under ``random`` and
``load-weighted``, the hub asked keeping the topic while its load is near the region's mean).
The policy chooses among the alive hubs the caller did not exclude (drained hubs, hubs it
cannot reach, itself when it cannot store the topic). It never moves a topic that has an
owner: owned topics stay where they are until the rebalancer (``hedwig.placement.rebalance``,
by load, whatever the policy), a drain or an administrator's move hands them over.

- ``random``: uniform among alive hubs (the original Hedwig's default).
- ``load-weighted``: random, weighted towards hubs with less load (the original's option), so a
  hot hub still gets some topics but fewer; a burst of claims does not all land on the one hub
  that looked idlest a moment ago, which is what plain least-loaded does.
- ``least-loaded``: the hub with the least load; ties broken at random.
- ``consistent-hash``: the topic's place on a hash ring of the alive hubs (``VIRTUAL_NODES``
  points each), so hubs that see the same alive hubs give the same answer without
  coordination. The ring places unowned topics only: a joining hub takes nothing from it (the
  topics keep their owners; it gets new topics whose place is its own, and load from the
  rebalancer), and the topics of a hub that leaves, once unowned, go wherever the ring of the
  hubs left places them. Each hub builds the ring from its own list of alive hubs (at most a
  fraction of a second old) less the hubs it excludes, so while membership changes two hubs
  may answer differently; the claim's compare-and-set on the owner record settles it.

Load is a hub's message rate in plus out, plus a floor per owned topic so that idle topics
still count; reports older than ``max_age_ms`` are treated as unknown (weight of a median hub).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from enum import Enum

from hedwig.metadata.records import HubStatus

VIRTUAL_NODES = 64
TOPIC_FLOOR = 1.0  # messages/s a topic counts for even when idle


class PlacementPolicy(str, Enum):
    RANDOM = "random"
    LOAD_WEIGHTED = "load-weighted"
    LEAST_LOADED = "least-loaded"
    CONSISTENT_HASH = "consistent-hash"


POLICIES = [p.value for p in PlacementPolicy]


def hub_load(
    h: HubStatus, now_ms: int | None = None, max_age_ms: int | None = None
) -> float | None:
    """A hub's load as one number, or ``None`` if unknown or expired."""
    load = h.load
    if load is None:
        return None
    if now_ms is not None and max_age_ms is not None and now_ms - load.timestamp_ms > max_age_ms:
        return None
    return load.msg_in + load.msg_out + TOPIC_FLOOR * load.topics


def _hash(s: str) -> int:
    return int.from_bytes(hashlib.blake2b(s.encode(), digest_size=8).digest(), "big")


def consistent_hash(topic: str, addresses: Sequence[str]) -> str:
    ring = sorted((_hash(f"{a}#{i}"), a) for a in addresses for i in range(VIRTUAL_NODES))
    h = _hash(topic)
    for point, address in ring:
        if point >= h:
            return address
    return ring[0][1]


def choose_hub(
    hubs: Sequence[HubStatus],
    policy: PlacementPolicy | str,
    topic: str,
    *,
    rng: random.Random | None = None,
    now_ms: int | None = None,
    max_age_ms: int | None = None,
    exclude: Callable[[str], bool] | None = None,
) -> str | None:
    """The address of the hub that should own ``topic``; ``None`` if no hub is alive."""
    rng = rng or random.Random()
    alive = [h for h in hubs if h.alive and not (exclude and exclude(h.address))]
    if not alive:
        return None
    policy = PlacementPolicy(policy)
    if policy is PlacementPolicy.RANDOM:
        return rng.choice(alive).address
    if policy is PlacementPolicy.CONSISTENT_HASH:
        return consistent_hash(topic, sorted(h.address for h in alive))
    loads = [hub_load(h, now_ms, max_age_ms) for h in alive]
    known = sorted(v for v in loads if v is not None)
    median = known[len(known) // 2] if known else 0.0
    values = [median if v is None else v for v in loads]
    if policy is PlacementPolicy.LEAST_LOADED:
        low = min(values)
        return rng.choice([h for h, v in zip(alive, values, strict=True) if v == low]).address
    # load-weighted: weight inversely to load, relative to the busiest hub
    top = max(values) or 1.0
    weights = [top - v + top * 0.1 for v in values]
    return rng.choices(alive, weights=weights, k=1)[0].address
