"""The bundle map (``hedwig.metadata.bundles``): every topic in exactly one bundle, splits and
merges that keep the map whole, names that round-trip, records that refuse corruption."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.bundles import (
    HASH_SPACE,
    MAX_BUNDLES,
    Bundle,
    BundleClaim,
    BundleMap,
    topic_hash,
)


def test_a_uniform_map_cuts_the_space_into_equal_bundles() -> None:
    m = BundleMap.uniform(4)
    assert [b.name for b in m.bundles] == [
        "00000000_3fffffff",
        "40000000_7fffffff",
        "80000000_bfffffff",
        "c0000000_ffffffff",
    ]
    assert {b.width for b in m.bundles} == {HASH_SPACE // 4}
    assert BundleMap.uniform(1).bundles == (Bundle(0, HASH_SPACE),)
    for bad in (0, 3, MAX_BUNDLES * 2):
        with pytest.raises(UsageError):
            BundleMap.uniform(bad)


def test_the_hash_is_fixed_and_spreads_sequential_names_evenly() -> None:
    # Fixed: clients of any version and language must agree on it.
    assert topic_hash("a/b") == 2193284967
    assert topic_hash("scale/1") == 1881127321
    assert topic_hash("") == 0x1271CF25
    m = BundleMap.uniform(64)
    counts: dict[Bundle, int] = {}
    for i in range(64_000):
        b = m.bundle_of(f"scale/{i}")
        counts[b] = counts.get(b, 0) + 1
    assert len(counts) == 64
    # 1,000 expected each; a random hash's standard deviation is about 32.
    assert min(counts.values()) > 850 and max(counts.values()) < 1150


@given(st.lists(st.integers(1, HASH_SPACE - 1), max_size=40), st.text(max_size=30))
def test_every_topic_is_in_exactly_one_bundle(cuts: list[int], topic: str) -> None:
    m = BundleMap((0, *sorted(set(cuts)), HASH_SPACE))
    b = m.bundle_of(topic)
    assert b.holds(topic)
    assert sum(1 for each in m.bundles if each.holds(topic)) == 1
    assert m.find(b.name) == b


def test_split_and_merge_keep_the_map_whole_and_count_generations() -> None:
    m = BundleMap.uniform(2)
    left = m.bundles[0]
    s = m.split(left)
    assert s.generation == 1 and len(s) == 3
    assert s.bundles[0] == Bundle(0, HASH_SPACE // 4)
    assert m.find(left.name) == left and s.find(left.name) is None  # a new name after a split
    at = s.split(s.bundles[2], at=HASH_SPACE - 1)
    assert at.bundles[-1] == Bundle(HASH_SPACE - 1, HASH_SPACE)
    with pytest.raises(UsageError):
        at.split(at.bundles[-1])  # one hash wide: never split (a single hot topic)
    with pytest.raises(UsageError):
        s.split(left)  # not a bundle of this map any more
    with pytest.raises(UsageError):
        s.split(s.bundles[0], at=s.bundles[0].end)  # not strictly inside
    merged = s.merge(s.bundles[0], s.bundles[1])
    assert merged.boundaries == m.boundaries and merged.generation == 2
    with pytest.raises(UsageError):
        s.merge(s.bundles[0], s.bundles[2])  # not neighbours


def test_a_full_map_is_not_split() -> None:
    m = BundleMap.uniform(MAX_BUNDLES)
    with pytest.raises(UsageError):
        m.split(m.bundles[0])


def test_names_round_trip_and_bad_names_are_refused() -> None:
    for b in BundleMap.uniform(8).bundles:
        assert Bundle.parse(b.name) == b
    for bad in ("", "x", "00000000", "00000000-3fffffff", "0000000g_3fffffff", "1_2"):
        with pytest.raises(UsageError):
            Bundle.parse(bad)
    with pytest.raises(UsageError):
        Bundle.parse("40000000_3fffffff")  # empty range


def test_the_record_round_trips_and_refuses_corruption() -> None:
    m = BundleMap.uniform(4).split(BundleMap.uniform(4).bundles[3])
    assert BundleMap.from_json(m.to_json()) == m
    assert m.to_json().startswith(b'{"boundaries":[0,1073741824,')
    for raw in (
        b"[]",
        b"{}",
        b'{"boundaries": "x"}',
        b'{"boundaries": [0, 5, 5, 4294967296]}',
        b'{"boundaries": [1, 4294967296]}',
        b'{"boundaries": [0, 2147483648]}',
        b'{"boundaries": [0, true, 4294967296]}',
        b'{"boundaries": [0, 1.5, 4294967296]}',
        b'{"boundaries": [0, 4294967296], "generation": -1}',
        b'{"boundaries": [0, 4294967296], "generation": "1"}',
        b"{not json",
    ):
        with pytest.raises(MetadataError):
            BundleMap.from_json(raw)


def test_a_claim_says_whether_it_won() -> None:
    assert not BundleClaim(None).claimed
