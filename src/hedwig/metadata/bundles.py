"""A region's bundle map: the topic-name hash space cut into ranges, the unit of ownership.

Every topic name hashes to a point of ``[0, 2**32)`` (``topic_hash``: the first four bytes of
its BLAKE2b digest, big-endian, so every hub and client, in any language, agrees). The map cuts
that space at its ``boundaries`` into **bundles**, each the half-open range ``[start, end)``
between two neighbouring boundaries; the topic belongs to the bundle holding its hash
(``bundle_of``, a bisection). A bundle, not a topic, is what a hub claims, what the balancer
moves and splits, and what a failover takes over: a million topics become a few thousand
owner records, on one session or lease per hub (Pulsar's namespace bundles, which hash with
CRC32: over names that differ in their last digits, as a workload's usually do, CRC32 filled
1,024 equal ranges three times as unevenly as a random hash does, BLAKE2b as evenly).

The rules kept:

- The boundaries start at 0, end at ``HASH_SPACE``, and increase strictly: the bundles cover
  the whole space and never overlap, so every topic is in exactly one.
- A bundle is named by its range (``Bundle.name``: first and last hash, eight hex digits
  each, ``00000000_3fffffff``): a split or a merge makes bundles of new names, so an owner
  record of the bundle before never passes for one of after.
- The map changes only by compare-and-set of the whole record (``BundleMapManager``), one
  split or merge at a time, and ``generation`` counts the changes (for people, metrics, and
  a client that caches the map: an answer naming a later generation tells it to read again).
- A split cuts one bundle in two at a point strictly inside it (the middle by default; a
  bundle one hash wide cannot be split, so a single hot topic is never split forever); a
  merge joins two neighbouring bundles. At most ``MAX_BUNDLES`` bundles: their record stays
  well inside ZooKeeper's 1 MiB and etcd's 1.5 MiB request limits.
- A region starts with ``uniform(count)``, ``count`` equal bundles (a power of two, so a
  split of equal halves keeps them equal).
"""

from __future__ import annotations

import bisect
import hashlib
from dataclasses import dataclass, field

from hedwig.errors import MetadataError, UsageError
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.metadata.records.hubs import HubInfo
from hedwig.metadata.records.versions import Version, Versioned

# The hash space: a topic's hash is a point of [0, HASH_SPACE).
HASH_SPACE = 1 << 32
# Bundles in a map at most: 16,384 boundaries are about 180 KB of JSON (ZooKeeper's default
# request limit is 1 MiB, etcd's 1.5 MiB), and at Pulsar's split threshold of 1,000 topics a
# bundle, room for 16 million topics.
MAX_BUNDLES = 16_384
# Bundles a new region starts with (Pulsar's 5.0 default is 32, at most 128 before splits):
# enough for three hubs to share evenly from the start, few enough that a bundle of a small
# region still holds many topics.
DEFAULT_BUNDLES = 32


def topic_hash(topic: str) -> int:
    """Where ``topic`` falls in the hash space (the same on every hub and client)."""
    return int.from_bytes(hashlib.blake2b(topic.encode(), digest_size=4).digest(), "big")


@dataclass(frozen=True, slots=True, order=True)
class Bundle:
    """The topics whose hash is in ``[start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start < self.end <= HASH_SPACE:
            raise UsageError(
                f"a bundle is a range inside [0, 2^32), got [{self.start}, {self.end})"
            )

    @property
    def name(self) -> str:
        """The bundle's name: its first and last hash, in hex (``00000000_3fffffff``)."""
        return f"{self.start:08x}_{self.end - 1:08x}"

    @property
    def width(self) -> int:
        return self.end - self.start

    def holds(self, topic: str) -> bool:
        return self.start <= topic_hash(topic) < self.end

    @classmethod
    def parse(cls, name: str) -> Bundle:
        """The bundle named ``name`` (``UsageError`` if it is not a bundle's name)."""
        first, sep, last = name.partition("_")
        if not sep or len(first) != 8 or len(last) != 8:
            raise UsageError(f"not a bundle's name: {name!r} (expected like 00000000_3fffffff)")
        try:
            start, end = int(first, 16), int(last, 16) + 1
        except ValueError as exc:
            raise UsageError(f"not a bundle's name: {name!r}") from exc
        return cls(start, end)


@dataclass(frozen=True, slots=True)
class BundleMap:
    """The region's bundles, as stored in its bundle map record (see the module's rules)."""

    boundaries: tuple[int, ...]
    generation: int = 0
    # The bundles, built once (a map is read once per change and asked for every request).
    _bundles: tuple[Bundle, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        b = self.boundaries
        if len(b) < 2 or b[0] != 0 or b[-1] != HASH_SPACE:
            raise MetadataError("a bundle map's boundaries run from 0 to 2^32")
        if any(b[i] >= b[i + 1] for i in range(len(b) - 1)):
            raise MetadataError("a bundle map's boundaries must increase strictly")
        if len(b) - 1 > MAX_BUNDLES:
            raise MetadataError(f"a bundle map holds at most {MAX_BUNDLES} bundles")
        if self.generation < 0:
            raise MetadataError("a bundle map's generation is not negative")
        bundles = tuple(Bundle(b[i], b[i + 1]) for i in range(len(b) - 1))
        object.__setattr__(self, "_bundles", bundles)

    @classmethod
    def uniform(cls, count: int = DEFAULT_BUNDLES) -> BundleMap:
        """``count`` equal bundles (a power of two from 1 to ``MAX_BUNDLES``)."""
        if count < 1 or count > MAX_BUNDLES or count & (count - 1):
            raise UsageError(f"a region starts with a power of two bundles, 1 to {MAX_BUNDLES}")
        step = HASH_SPACE // count
        return cls(tuple(i * step for i in range(count + 1)))

    @property
    def bundles(self) -> tuple[Bundle, ...]:
        return self._bundles

    def __len__(self) -> int:
        return len(self._bundles)

    def bundle_of_hash(self, point: int) -> Bundle:
        if not 0 <= point < HASH_SPACE:
            raise UsageError(f"a hash is in [0, 2^32), got {point}")
        return self._bundles[bisect.bisect_right(self.boundaries, point) - 1]

    def bundle_of(self, topic: str) -> Bundle:
        """The bundle ``topic`` belongs to."""
        return self.bundle_of_hash(topic_hash(topic))

    def find(self, name: str) -> Bundle | None:
        """The bundle of this map named ``name``; ``None`` if there is none (an older or
        newer map's bundle)."""
        bundle = Bundle.parse(name)
        i = bisect.bisect_left(self.boundaries, bundle.start)
        found = (
            i + 1 < len(self.boundaries)
            and self.boundaries[i] == bundle.start
            and self.boundaries[i + 1] == bundle.end
        )
        return bundle if found else None

    def _index(self, bundle: Bundle) -> int:
        i = bisect.bisect_left(self.boundaries, bundle.start)
        if (
            i + 1 >= len(self.boundaries)
            or self.boundaries[i] != bundle.start
            or self.boundaries[i + 1] != bundle.end
        ):
            raise UsageError(
                f"bundle {bundle.name} is not in the map (generation {self.generation})"
            )
        return i

    def split(self, bundle: Bundle, at: int | None = None) -> BundleMap:
        """The map with ``bundle`` cut in two at ``at`` (its middle by default): the next
        generation. ``UsageError`` if the bundle is not this map's, ``at`` is not strictly
        inside it (a bundle one hash wide cannot be split), or the map is full."""
        self._index(bundle)
        point = bundle.start + bundle.width // 2 if at is None else at
        if not bundle.start < point < bundle.end:
            raise UsageError(
                f"bundle {bundle.name} cannot be split at {point}: not strictly inside it"
            )
        if len(self) >= MAX_BUNDLES:
            raise UsageError(f"the map holds {MAX_BUNDLES} bundles already, the most it may")
        boundaries = tuple(sorted((*self.boundaries, point)))
        return BundleMap(boundaries, self.generation + 1)

    def merge(self, left: Bundle, right: Bundle) -> BundleMap:
        """The map with neighbours ``left`` and ``right`` joined: the next generation."""
        i = self._index(left)
        if self._index(right) != i + 1:
            raise UsageError(f"bundles {left.name} and {right.name} are not neighbours")
        boundaries = self.boundaries[: i + 1] + self.boundaries[i + 2 :]
        return BundleMap(boundaries, self.generation + 1)

    def to_json(self) -> bytes:
        return dump_object({"boundaries": list(self.boundaries), "generation": self.generation})

    @classmethod
    def from_json(cls, raw: bytes) -> BundleMap:
        d = load_object(raw, "bundle map")
        try:
            boundaries = d["boundaries"]
            if not isinstance(boundaries, list) or not all(
                type(x) is int
                for x in boundaries  # bools and floats are corrupt too
            ):
                raise TypeError("boundaries is not a list of integers")
            generation = d.get("generation", 0)
            if type(generation) is not int:
                raise TypeError("generation is not an integer")
            return cls(tuple(boundaries), generation)
        except (TypeError, KeyError) as exc:
            raise MetadataError(f"corrupt bundle map record: {exc}") from exc


@dataclass(frozen=True, slots=True)
class BundleClaim:
    """What ``claim_bundle`` did: claimed (``version``: the new owner record's), or refused
    (``owner``: the record in the way, ``None`` if it went before it could be read)."""

    version: Version | None
    owner: Versioned[HubInfo] | None = None

    @property
    def claimed(self) -> bool:
        return self.version is not None
