"""The hubs' records: who owns a topic (``HubInfo``), and what a hub reports about itself
(``HubLoad``, with its hottest topics' ``TopicLoad``; ``HubStatus`` as the registry lists it).

A hub writes the same owner record with every claim it makes, and its load report every few
seconds; other hubs read every report up to five times a second while they claim. So the
owner record's bytes are made once per hub, a report is written field by field (not through
``asdict``'s deep copy), and the same report's bytes are parsed once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import decode_as, dump_object, load_object


@dataclass(frozen=True, slots=True)
class HubInfo:
    """Who owns a topic: the hub's client address and its session epoch.

    ``epoch`` is the creation zxid (czxid) of the hub's ``alive`` znode, which changes every
    time the hub starts a ZooKeeper session. A record whose address is ours but whose epoch is
    not is left over from a previous session of ours: stale, safe to delete and claim again.
    """

    address: str
    epoch: int

    def to_json(self) -> bytes:
        return _hub_info_json(self.address, self.epoch)

    @classmethod
    def from_json(cls, raw: bytes) -> HubInfo:
        return decode_as(_HUB_INFO, raw, "owner record")


_HUB_INFO = msgspec.json.Decoder(HubInfo)


@functools.lru_cache(maxsize=16)
def _hub_info_json(address: str, epoch: int) -> bytes:
    """A hub writes the same owner record with every claim it makes: written once."""
    return dump_object({"address": address, "epoch": epoch})


@dataclass(frozen=True, slots=True)
class TopicLoad:
    """One topic's share of a hub's load, as EWMA rates per second."""

    msg_in: float = 0.0
    bytes_in: float = 0.0
    msg_out: float = 0.0
    bytes_out: float = 0.0
    subscribers: int = 0
    backlog: int = 0


@dataclass(frozen=True, slots=True)
class HubLoad:
    """What a hub writes into its ``alive`` znode. ``timestamp_ms`` lets readers expire it.

    The record is rewritten every few seconds, so its size must not follow the number of
    topics the hub owns (ZooKeeper refuses records over 1 MB, and a request that large makes
    the server drop the whole session). ``topics`` and the rates are totals over every owned
    topic; ``topic_loads`` lists only the hottest of them (``HubConfig.load_report_topics``,
    hottest by messages in plus out): what the rebalancer moves. A topic not listed carries no
    more than the least of the listed ones; its own numbers come from its owner
    (``TopicStats``) or from the store (subscriptions, consume marks).
    """

    timestamp_ms: int = 0
    topics: int = 0
    connections: int = 0
    cpu: float = 0.0
    msg_in: float = 0.0
    bytes_in: float = 0.0
    msg_out: float = 0.0
    bytes_out: float = 0.0
    topic_loads: dict[str, TopicLoad] = field(default_factory=dict)
    # The hub's internal (hub-to-hub) listener, if it has one: where other hubs send storage
    # and claim requests (``hedwig.hub.owning.peers``).
    internal: str = ""
    # The hub's stable id (``hedwig.hub.process.identity``): what ledger ensembles name its replicas
    # by, so they stay reachable when the hub comes back on another address.
    hub_id: str = ""
    # The hub's external client listener's advertised address, if it has one: what the hubs
    # name this hub as to clients that came in through their own external listeners
    # (``hedwig.hub.front.outward``). Absent (read as none) in earlier versions' reports.
    external: str = ""
    # Fan-out topics this hub delivers for their owners (their subscribers here): counted in
    # the totals above, not in ``topic_loads`` (the owner lists and moves the topic).
    delivering: dict[str, TopicLoad] = field(default_factory=dict)
    # Whether the hub owns topics by bundle (``--bundles``): a region's hubs must all do the
    # same, and a hub refuses claims while one of the other kind is alive. Absent (read as
    # false) in the reports of earlier versions, which own topics one by one.
    bundles: bool = False
    # Messages and bytes a second this hub admitted per namespace with a publish rate quota,
    # for the busiest (``HubConfig.load_report_topics``) of them: how the hubs serving a
    # namespace divide its quota (``hedwig.hub.front.quotas``). Absent (none) in earlier
    # versions' reports and when empty.
    namespaces: dict[str, tuple[float, float]] = field(default_factory=dict)

    _FIELDS: ClassVar[frozenset[str]] = frozenset(
        [
            "timestamp_ms",
            "topics",
            "connections",
            "cpu",
            "msg_in",
            "bytes_in",
            "msg_out",
            "bytes_out",
            "internal",
            "hub_id",
            "bundles",
            "external",
        ]
    )

    @property
    def rate(self) -> float:
        """Messages per second in plus out, over every owned topic: the rebalancer's load."""
        return self.msg_in + self.msg_out

    @property
    def unlisted_rate(self) -> float:
        """The share of ``rate`` carried by topics not in ``topic_loads``."""
        listed = sum(t.msg_in + t.msg_out for t in self.topic_loads.values())
        return max(0.0, self.rate - listed)

    def to_json(self) -> bytes:
        # Field by field, not ``asdict``: its deep copy of every listed topic was a third of
        # writing a report, which a claiming hub does up to five times a second.
        d: dict[str, Any] = {name: getattr(self, name) for name in self._FIELDS}
        d["topic_loads"] = {t: _topic_load_dict(v) for t, v in self.topic_loads.items()}
        if self.delivering:  # absent when empty, as hubs before fan-out wrote it
            d["delivering"] = {t: _topic_load_dict(v) for t, v in self.delivering.items()}
        if self.namespaces:
            d["namespaces"] = {n: list(r) for n, r in self.namespaces.items()}
        return dump_object(d)

    @classmethod
    def from_json(cls, raw: bytes) -> HubLoad:
        """Fields this version does not know are ignored (a newer hub's report).

        The same bytes give the same (immutable) record, kept for the last few reports: a
        claiming hub reads the registry up to five times a second and a report changes every
        few seconds, and parsing every hub's hundred hottest topics each time was 3 % of a
        claiming hub's CPU."""
        return _hub_load(bytes(raw))

    @classmethod
    def _parse(cls, raw: bytes) -> HubLoad:
        d = load_object(raw, "load")
        try:
            tl = {k: TopicLoad(**v) for k, v in dict(d.get("topic_loads", {})).items()}
            dl = {k: TopicLoad(**v) for k, v in dict(d.get("delivering", {})).items()}
            ns = {n: _rate_pair(r) for n, r in dict(d.get("namespaces", {})).items()}
            known = {k: v for k, v in d.items() if k in cls._FIELDS}
            if not isinstance(known.get("bundles", False), bool):
                raise TypeError("bundles is not true or false")
            return cls(topic_loads=tl, delivering=dl, namespaces=ns, **known)
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt load record: {exc}") from exc


def _rate_pair(raw: Any) -> tuple[float, float]:
    if (
        not isinstance(raw, list)
        or len(raw) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw)
    ):
        raise TypeError(f"a namespace's rates are not [messages, bytes]: {raw!r}")
    return (float(raw[0]), float(raw[1]))


def _topic_load_dict(load: TopicLoad) -> dict[str, Any]:
    return {name: getattr(load, name) for name in TopicLoad.__slots__}


@functools.lru_cache(maxsize=64)
def _hub_load(raw: bytes) -> HubLoad:
    return HubLoad._parse(raw)


@dataclass(frozen=True, slots=True)
class HubStatus:
    """A registered hub as the store sees it: alive if its ephemeral ``alive`` node exists."""

    address: str
    alive: bool
    epoch: int = 0
    load: HubLoad | None = None

    @property
    def storage_id(self) -> str:
        """How ledger ensembles name this hub's replicas: its id ("" for a record without one,
        which no ensemble names)."""
        return self.load.hub_id if self.load is not None else ""
