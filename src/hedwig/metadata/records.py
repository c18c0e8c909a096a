"""Records kept in the metadata store, immutable and validated when built.

Each record serialises to compact JSON (``to_json``) and back (``from_json``). JSON rather than
a binary format because operators read these znodes with ``zkCli.sh`` when things go wrong;
the records are small and off the publish path. ``docs/zookeeper-layout.md`` shows examples.

The JSON is read and written by ``msgspec`` rather than the standard library: a take-over
reads a ledger's metadata and writes three, and a survivor of a failover does thousands a
second. ``msgspec`` decodes a ledger's metadata straight into the record, types checked (a
field of the wrong type is a corrupt record, said so), in a seventh of the time ``json`` and
building the record took (8 µs: a twentieth of a survivor's failover), and writes it in a
third of the time; keys sorted and compact as before. Strings are written as UTF-8 where
``json`` escaped what is not ASCII: both read either.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, NewType, TypeVar

import msgspec

from hedwig.errors import MetadataError

Version = NewType("Version", int)
# Passed as the expected version to create a record that must not exist yet.
NEW_VERSION = Version(-1)
# Passed as the expected version to overwrite or delete whatever is stored.
ANY_VERSION = Version(-2)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Versioned(Generic[T]):
    value: T
    version: Version


_DECODER = msgspec.json.Decoder()  # untyped: objects as dicts, arrays as lists
# Keys sorted, no spaces: the bytes ``json.dumps(..., separators=(",", ":"), sort_keys=True)``
# made, but for strings with characters past ASCII (UTF-8 here, escaped there).
_ENCODER = msgspec.json.Encoder(order="sorted")


def _load(raw: bytes, what: str) -> dict[str, Any]:
    try:
        data = _DECODER.decode(raw) if raw else {}
    except msgspec.DecodeError as exc:
        raise MetadataError(f"corrupt {what} record: {exc}") from exc
    if not isinstance(data, dict):
        raise MetadataError(f"corrupt {what} record: not an object")
    return data


def _dump(data: dict[str, Any]) -> bytes:
    return _ENCODER.encode(data)


def _typed(decoder: msgspec.json.Decoder[T], raw: bytes, what: str) -> T:
    """``raw`` read as a record of ``decoder``'s type, checked as it is read (nothing at all
    reads as an empty object, as ``_load`` has it)."""
    try:
        return decoder.decode(raw or b"{}")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise MetadataError(f"corrupt {what}: {exc}") from exc


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
        return _typed(_HUB_INFO, raw, "owner record")


_HUB_INFO = msgspec.json.Decoder(HubInfo)


@functools.lru_cache(maxsize=16)
def _hub_info_json(address: str, epoch: int) -> bytes:
    """A hub writes the same owner record with every claim it makes: written once."""
    return _dump({"address": address, "epoch": epoch})


@dataclass(frozen=True, slots=True)
class TopicClaim:
    """What ``claim_topic`` did. Claimed: ``version`` is the owner record's, and ``new`` says
    the topic was created with it (so it has nothing else yet: no configuration, ledgers or
    subscriptions to read). Not claimed: ``owner`` is the record in the way, as read in the
    same request where the store allows (``None`` if it was gone by then)."""

    version: Version | None
    new: bool = False
    owner: Versioned[HubInfo] | None = None
    # Claimed, not new: the topic's configuration as of the claim, where the store read it in
    # the claim's own request (etcd); ``None``: not read (the claimer reads it after).
    config: Versioned[TopicConfig] | None = None
    # Claimed, not new: the topic's ledger list as of the claim, where the store read it in
    # the claim's own request (etcd): version ``NEW_VERSION`` if it has none yet; ``None``:
    # not read (the take-over reads it first).
    ranges: Versioned[LedgerRanges] | None = None
    # Claimed and new, given a first ledger: that ledger's metadata (its id given) and the
    # version of the persistence record naming it, made with the topic (``start_topic_log``
    # done in the claim's request).
    log: tuple[Versioned[LedgerMetadata], Version] | None = None


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
    # and claim requests (``hedwig.hub.peers``).
    internal: str = ""
    # The hub's stable id (``hedwig.hub.identity``): what ledger ensembles name its replicas
    # by, so they stay reachable when the hub comes back on another address.
    hub_id: str = ""
    # Fan-out topics this hub delivers for their owners (their subscribers here): counted in
    # the totals above, not in ``topic_loads`` (the owner lists and moves the topic).
    delivering: dict[str, TopicLoad] = field(default_factory=dict)

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
        return _dump(d)

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
        d = _load(raw, "load")
        try:
            tl = {k: TopicLoad(**v) for k, v in dict(d.get("topic_loads", {})).items()}
            dl = {k: TopicLoad(**v) for k, v in dict(d.get("delivering", {})).items()}
            known = {k: v for k, v in d.items() if k in cls._FIELDS}
            return cls(topic_loads=tl, delivering=dl, **known)
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt load record: {exc}") from exc


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
        """How ledger ensembles name this hub's replicas: its id, or (a hub from before ids,
        whose ledgers name it by address) its address."""
        return self.load.hub_id if self.load is not None and self.load.hub_id else self.address


@dataclass(frozen=True, slots=True)
class ReplicationConfig:
    """How a topic's ledgers are replicated: ``ensemble >= write_quorum >= ack_quorum >= 1``."""

    ensemble: int = 1
    write_quorum: int = 1
    ack_quorum: int = 1

    def __post_init__(self) -> None:
        if not self.ensemble >= self.write_quorum >= self.ack_quorum >= 1:
            raise MetadataError(
                "replication needs ensemble >= write_quorum >= ack_quorum >= 1, got "
                f"{self.ensemble}/{self.write_quorum}/{self.ack_quorum}"
            )


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Per-topic settings stored in the topic znode; ``None`` fields take the region default.

    ``retention_ms`` / ``retention_bytes`` keep consumed messages for late readers (batch jobs
    reading by sequence id); unconsumed messages are always kept for existing subscribers.

    ``inactive_topic_expiry_ms``: a topic nobody published to and nobody was attached to for
    this long is deleted (Pulsar's inactive-topic deletion). ``subscription_expiry_ms``: a
    subscription nobody attached to or consumed from for this long is deleted, so an abandoned
    one stops pinning its messages on disk (Pulsar's subscription expiration). Both off
    (``None``) unless set here or in the region's defaults.
    """

    replication: ReplicationConfig | None = None
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_message_size: int | None = None
    inactive_topic_expiry_ms: int | None = None
    subscription_expiry_ms: int | None = None

    _NUMBERS: ClassVar[tuple[str, ...]] = (
        "retention_ms",
        "retention_bytes",
        "max_message_size",
        "inactive_topic_expiry_ms",
        "subscription_expiry_ms",
    )

    def __post_init__(self) -> None:
        for name in self._NUMBERS:
            v = getattr(self, name)
            if v is not None and v < 0:
                raise MetadataError(f"{name} must not be negative, got {v}")

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.replication is not None:
            d["replication"] = asdict(self.replication)
        for name in self._NUMBERS:
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return _dump(d)

    @classmethod
    def from_json(cls, raw: bytes) -> TopicConfig:
        if not raw or raw == b"{}":
            return NO_CONFIG  # most topics: one record for all, nothing built per read
        d = _load(raw, "topic config")
        try:
            rep = d.get("replication")
            return cls(
                replication=ReplicationConfig(**rep) if rep else None,
                **{name: d.get(name) for name in cls._NUMBERS},
            )
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt topic config: {exc}") from exc

    def merged(self, defaults: TopicConfig) -> TopicConfig:
        """This config with unset fields taken from ``defaults`` (``defaults`` itself if this
        one sets none: what a take-over of a topic with no settings of its own does)."""
        if self is NO_CONFIG or self == NO_CONFIG:
            return defaults
        numbers = {}
        for name in self._NUMBERS:
            own = getattr(self, name)
            numbers[name] = own if own is not None else getattr(defaults, name)
        return TopicConfig(replication=self.replication or defaults.replication, **numbers)


# A topic's configuration when it sets nothing: the region's defaults apply throughout.
NO_CONFIG = TopicConfig()


class LedgerRange(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """One ledger of a topic's log and the sequence ids it holds.

    ``end_seq`` is ``None`` while the ledger is the open tail; ``end_seq = start_seq - 1``
    means the ledger holds no message. Stored as ``[ledger_id, start_seq, end_seq]``.
    """

    ledger_id: int
    start_seq: int
    end_seq: int | None = None


class LedgerRanges(msgspec.Struct, frozen=True, gc=False):
    """The topic's log: its ledgers in order (the TopicPersistenceManager's record).

    ``msgspec`` structs, as the ledger's metadata (``LedgerMetadata``): decoded from the
    stored record in one call, and, holding only numbers, never walked by the cycle
    collector; every owned topic keeps one, and a failover's take-overs make them by the
    hundred thousand.
    """

    ranges: tuple[LedgerRange, ...] = ()

    def to_json(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def from_json(cls, raw: bytes) -> LedgerRanges:
        return _typed(_RANGES, raw, "ledger ranges")

    @property
    def last_seq(self) -> int:
        """The last sequence id of the closed ledgers (0 if none)."""
        for r in reversed(self.ranges):
            if r.end_seq is not None:
                return r.end_seq
        return self.ranges[0].start_seq - 1 if self.ranges else 0

    def with_tail(self, ledger_id: int, start_seq: int) -> LedgerRanges:
        return LedgerRanges((*self.ranges, LedgerRange(ledger_id, start_seq)))

    def close_tail(self, end_seq: int) -> LedgerRanges:
        if not self.ranges or self.ranges[-1].end_seq is not None:
            return self
        last = self.ranges[-1]
        return LedgerRanges(
            (*self.ranges[:-1], LedgerRange(last.ledger_id, last.start_seq, end_seq))
        )


_RANGES = msgspec.json.Decoder(LedgerRanges)


class LedgerState(str, Enum):
    OPEN = "OPEN"
    IN_RECOVERY = "IN_RECOVERY"
    CLOSED = "CLOSED"


class LedgerMetadata(msgspec.Struct, frozen=True, gc=False):
    """A ledger's metadata, changed only by CAS (see ``docs/architecture.md``, ledgers).

    ``fragments`` maps a first entry id to the ensemble (storage addresses) used from it on;
    an ensemble change appends a fragment. ``owner_epoch`` identifies the writer's ownership so
    a stale owner's metadata writes can be told apart.

    A ``msgspec`` struct, not a dataclass: a take-over builds several (read, marked, closed,
    the next ledger's), each copied with a change (``msgspec.structs.replace``), in a tenth of
    a frozen dataclass's time; and, holding only numbers, strings and tuples of them, it can
    be in no reference cycle, so the cycle collector never walks it (``gc=False``): one per
    owned topic is kept for as long as the topic is.
    """

    ledger_id: int
    topic: str
    ensemble_size: int
    write_quorum: int
    ack_quorum: int
    fragments: tuple[tuple[int, tuple[str, ...]], ...]
    state: LedgerState = LedgerState.OPEN
    last_entry_id: int = -1
    last_seq: int = 0
    length: int = 0
    owner: str = ""
    owner_epoch: int = 0
    created_ms: int = 0
    closed_ms: int = 0

    def __post_init__(self) -> None:
        if not self.ensemble_size >= self.write_quorum >= self.ack_quorum >= 1:
            raise MetadataError("ledger needs ensemble >= write_quorum >= ack_quorum >= 1")

    def ensemble_for(self, entry_id: int) -> tuple[str, ...]:
        current = self.fragments[0][1]
        for first, ensemble in self.fragments:
            if first <= entry_id:
                current = ensemble
            else:
                break
        return current

    def to_json(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def from_json(cls, raw: bytes, ledger_id: int | None = None) -> LedgerMetadata:
        """``ledger_id``: the id the store keeps the record under, which stores pass
        and which counts over the record's own field."""
        md = _typed(_LEDGER_METADATA, raw, "ledger metadata")
        if ledger_id is not None and md.ledger_id != ledger_id:
            md = msgspec.structs.replace(md, ledger_id=ledger_id)
        return md


_LEDGER_METADATA = msgspec.json.Decoder(LedgerMetadata)


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

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.preferences is not None:
            p = asdict(self.preferences)
            p["options"] = dict(self.preferences.options)
            d["preferences"] = p
        if self.state is not None:
            d["state"] = asdict(self.state)
        return _dump(d)

    @classmethod
    def from_json(cls, raw: bytes) -> SubscriptionData:
        d = _load(raw, "subscription")
        try:
            p = d.get("preferences")
            s = d.get("state")
            prefs = None
            if p is not None:
                p = dict(p)
                p["options"] = tuple(sorted(dict(p.get("options", {})).items()))
                prefs = SubscriptionPreferences(**p)
            return cls(prefs, SubscriptionState(**s) if s is not None else None)
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt subscription: {exc}") from exc

    def merged_into(self, stored: SubscriptionData) -> SubscriptionData:
        """``stored`` with the parts this record sets replaced (a partial update)."""
        return SubscriptionData(
            self.preferences if self.preferences is not None else stored.preferences,
            self.state if self.state is not None else stored.state,
        )
