"""The placement policies, pure: ``choose_hub`` for an unowned topic under each policy, and
the bundle policies (``hedwig.placement.bundles``): consistent-hash places, what a joining
hub takes from the ring, where hot bundles split and when cold ones merge."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hedwig.errors import UsageError
from hedwig.metadata.bundles import Bundle, BundleMap, topic_hash
from hedwig.metadata.records import HubLoad, HubStatus
from hedwig.placement import PlacementPolicy, choose_hub
from hedwig.placement.bundles import (
    BundleLimits,
    BundleLoad,
    apply_splits,
    joining_moves,
    plan_merges,
    ring_place,
    split_points,
)
from hedwig.placement.choice import consistent_hash

HUBS = ["h1:1", "h2:1", "h3:1"]


def status(address: str, msg: float = 0.0, topics: int = 0, *, alive: bool = True) -> HubStatus:
    return HubStatus(address, alive, 1, HubLoad(timestamp_ms=90_000, topics=topics, msg_in=msg))


# choose_hub -------------------------------------------------------------------------------


def test_no_alive_hub_is_no_choice() -> None:
    hubs = [status("h1:1", alive=False), status("h2:1")]
    for policy in PlacementPolicy:
        assert choose_hub(hubs, policy, "t", exclude=lambda a: a == "h2:1") is None
        assert choose_hub([], policy, "t") is None


def test_random_chooses_only_alive_and_not_excluded_hubs_and_all_of_them() -> None:
    hubs = [status(a) for a in HUBS] + [status("dead:1", alive=False)]
    rng = random.Random(1)
    seen = Counter(
        choose_hub(hubs, "random", f"t{i}", rng=rng, exclude=lambda a: a == "h3:1")
        for i in range(600)
    )
    assert set(seen) == {"h1:1", "h2:1"}
    assert min(seen.values()) > 240  # uniform: 300 each expected


def test_least_loaded_takes_the_least_loaded_and_breaks_ties_at_random() -> None:
    hubs = [status("h1:1", 50), status("h2:1", 10), status("h3:1", 10)]
    rng = random.Random(2)
    seen = {choose_hub(hubs, PlacementPolicy.LEAST_LOADED, "t", rng=rng) for _ in range(50)}
    assert seen == {"h2:1", "h3:1"}


def test_an_expired_report_counts_as_a_median_hub() -> None:
    # h1's report says idle but is old: it counts as the median of the others (the upper
    # one of 20 and 30), so h2 is the least loaded; read without a clock, h1 is.
    hubs = [status("h1:1", 0), status("h2:1", 20), status("h3:1", 30)]
    hubs[0] = HubStatus("h1:1", True, 1, HubLoad(timestamp_ms=0, msg_in=0))
    rng = random.Random(3)
    seen = {
        choose_hub(hubs, "least-loaded", "t", rng=rng, now_ms=100_000, max_age_ms=30_000)
        for _ in range(50)
    }
    assert seen == {"h2:1"}
    assert choose_hub(hubs, "least-loaded", "t", rng=rng) == "h1:1"


def test_load_weighted_favours_light_hubs_but_still_uses_heavy_ones() -> None:
    hubs = [status("h1:1", 100), status("h2:1", 0)]
    rng = random.Random(4)
    seen = Counter(choose_hub(hubs, "load-weighted", f"t{i}", rng=rng) for i in range(1_000))
    assert seen["h2:1"] > 3 * seen["h1:1"] > 0


def test_consistent_hash_agrees_everywhere_and_moves_little_when_a_hub_joins() -> None:
    hubs = [status(a) for a in HUBS]
    topics = [f"t{i}" for i in range(3_000)]
    places = {t: choose_hub(hubs, "consistent-hash", t) for t in topics}
    assert places == {t: choose_hub(list(reversed(hubs)), "consistent-hash", t) for t in topics}
    assert all(places[t] == consistent_hash(t, sorted(HUBS)) for t in topics[:10])
    joined = {t: choose_hub([*hubs, status("h4:1")], "consistent-hash", t) for t in topics}
    moved = [t for t in topics if joined[t] != places[t]]
    assert all(joined[t] == "h4:1" for t in moved)  # only to the new hub
    assert 0.1 < len(moved) / len(topics) < 0.45  # about a quarter


def test_an_unknown_policy_is_refused() -> None:
    with pytest.raises(ValueError, match="nearest"):
        choose_hub([status("h1:1")], "nearest", "t")


# bundle places and joining ----------------------------------------------------------------


def test_ring_places_are_even_and_a_joining_hub_wins_only_its_own() -> None:
    names = [b.name for b in BundleMap.uniform(1_024).bundles]
    before = {n: ring_place(n, HUBS) for n in names}
    counts = Counter(before.values())
    assert set(counts) == set(HUBS) and min(counts.values()) > 280  # 341 each expected
    after = {n: ring_place(n, [*HUBS, "h4:1"]) for n in names}
    moved = [n for n in names if after[n] != before[n]]
    assert all(after[n] == "h4:1" for n in moved)
    assert 200 < len(moved) < 320  # a quarter: 256
    assert ring_place(names[0], []) is None


def test_a_joining_hub_takes_its_share_from_the_ring_and_nothing_else_moves() -> None:
    names = [b.name for b in BundleMap.uniform(64).bundles]
    owners = {n: ring_place(n, HUBS[:2]) or "" for n in names}
    assert joining_moves(owners, HUBS[:2]) == []  # balanced on the ring: nothing to do
    moves = joining_moves(owners, HUBS, limit=100)
    assert moves and all(m.destination == "h3:1" for m in moves)
    assert all(ring_place(m.bundle, HUBS) == "h3:1" for m in moves)
    assert all(m.source == owners[m.bundle] for m in moves)
    assert len(moves) <= 64 // 3
    after = dict(owners) | {m.bundle: m.destination for m in moves}
    again = joining_moves(after, HUBS, limit=100)
    assert again == []  # stable: applied, the policy asks for nothing more
    assert len(joining_moves(owners, HUBS, limit=3)) == 3


def test_a_joining_hub_the_ring_gives_nothing_takes_its_share_from_the_fullest() -> None:
    """Few bundles owned (a dozen topics in use): the ring can place none of them on the
    joining hub; it still takes its share, from the hubs over it, and then nothing moves."""
    names = [b.name for b in BundleMap.uniform(16).bundles]
    hubs = [*HUBS, "h4:1"]
    # Eight owned bundles, none of whose ring place among the four hubs is the fourth.
    owned = [n for n in names if ring_place(n, hubs) != "h4:1"][:8]
    owners = {n: HUBS[i % 3] for i, n in enumerate(owned)}  # 3/3/2
    moves = joining_moves(owners, hubs, limit=100)
    assert [m.destination for m in moves] == ["h4:1", "h4:1"]
    assert sorted(m.source for m in moves) == ["h1:1", "h2:1"]  # the two over their share
    after = owners | {m.bundle: m.destination for m in moves}
    assert Counter(after.values()) == Counter({h: 2 for h in hubs})
    assert joining_moves(after, hubs, limit=100) == []
    assert len(joining_moves(owners, hubs, limit=1)) == 1


def test_a_bundle_moved_off_its_place_by_load_is_not_pulled_back_by_a_full_hub() -> None:
    names = [b.name for b in BundleMap.uniform(32).bundles]
    owners = {n: ring_place(n, HUBS) or "" for n in names}
    counts = Counter(owners.values())
    (full, most), *_, (empty, least) = counts.most_common()
    assert most - 1 >= len(names) // len(HUBS) > least  # (the ring alone leaves it uneven)
    # The balancer moves one of the fullest hub's bundles to the emptiest, by load: the ring
    # place keeps its share without it and leaves it there.
    moved = next(n for n in names if owners[n] == full)
    owners[moved] = empty
    assert joining_moves(owners, HUBS, limit=100) == []


@given(
    st.dictionaries(st.integers(0, 63), st.sampled_from(HUBS), max_size=64),
    st.integers(2, 3),
)
def test_joining_moves_only_fill_hubs_short_of_their_share(
    owned: dict[int, str], hubs: int
) -> None:
    names = [b.name for b in BundleMap.uniform(64).bundles]
    alive = HUBS[:hubs]
    owners = {names[i]: h for i, h in owned.items()}
    moves = joining_moves(owners, alive, limit=1_000)
    live = {b: h for b, h in owners.items() if h in alive}
    low = len(live) // hubs
    before = Counter(live.values())
    after = Counter((live | {m.bundle: m.destination for m in moves}).values())
    for m in moves:
        assert before[m.destination] < low and before[m.source] > low
        assert after[m.destination] <= low and after[m.source] >= low
    # Applied, the policy asks for nothing more (no flapping).
    assert joining_moves(live | {m.bundle: m.destination for m in moves}, alive, limit=1_000) == []
    assert len({m.bundle for m in moves}) == len(moves)


# split and merge --------------------------------------------------------------------------


LIMITS = BundleLimits(max_topics=100, max_msg_rate=1_000.0, max_byte_rate=1e6)


def test_a_bundle_over_its_topics_or_a_spread_rate_splits_in_the_middle() -> None:
    b = BundleMap.uniform(4).bundles[1]
    middle = (b.start + b.width // 2,)
    assert split_points(BundleLoad(b, 101), LIMITS) == middle
    assert split_points(BundleLoad(b, 100, 999.0, 1e5), LIMITS) == ()
    spread = BundleLoad(b, 10, 2_000.0, hottest=("t", 300.0))
    assert split_points(spread, LIMITS) == middle
    assert split_points(BundleLoad(b, 10, 10.0, 2e6), LIMITS) == middle


def test_one_hot_topic_is_cut_out_alone_and_never_split_again() -> None:
    m = BundleMap.uniform(1)
    topic = "hot/topic"
    h = topic_hash(topic)
    load = BundleLoad(m.bundles[0], 50, 5_000.0, hottest=(topic, 4_900.0))
    points = split_points(load, LIMITS)
    assert points == tuple(p for p in (h, h + 1) if 0 < p < 2**32)
    cut = apply_splits(m, m.bundles[0], points)
    alone = cut.bundle_of(topic)
    assert alone == Bundle(h, h + 1) and cut.generation == len(points)
    # Still over the rate, alone: no split forever around one topic.
    assert split_points(BundleLoad(alone, 1, 5_000.0, hottest=(topic, 5_000.0)), LIMITS) == ()
    with pytest.raises(UsageError):
        split_points(
            BundleLoad(BundleMap.uniform(2).bundles[h < 2**31], 5, 5e3, hottest=(topic, 5e3)),
            LIMITS,
        )


def test_cold_neighbours_of_one_owner_merge_back_with_hysteresis() -> None:
    m = BundleMap.uniform(4)
    a, b, c, d = m.bundles
    owners = {a.name: "h1:1", b.name: "h1:1", c.name: "h1:1", d.name: "h2:1"}
    loads = {x.name: BundleLoad(x, 10, 10.0) for x in m.bundles}
    assert plan_merges(m, loads, owners, LIMITS, limit=4) == [(a, b)]
    # Neighbours of two owners never merge; nor one cooling down after a split.
    assert plan_merges(m, loads, owners, LIMITS, cooling={a.name}, limit=4) == [(b, c)]
    # Together at or above a quarter of a limit: left as they are.
    warm = dict(loads) | {b.name: BundleLoad(b, 15, 10.0), c.name: BundleLoad(c, 15, 10.0)}
    assert plan_merges(m, warm, owners, LIMITS, limit=4) == []
    merged = m.merge(a, b)
    assert split_points(BundleLoad(merged.bundles[0], 20, 20.0), LIMITS) == ()


def test_limits_are_checked() -> None:
    for bad in (
        {"max_topics": 1},
        {"max_msg_rate": 0.0},
        {"hot_topic_share": 0.0},
        {"merge_share": 0.5},
    ):
        with pytest.raises(UsageError):
            BundleLimits(**bad)
