"""A topic's records: its configuration (``TopicConfig``, with its ``ReplicationConfig``), and
what a claim of it did (``TopicClaim``).

Most topics set nothing of their own: their configuration reads as one shared record
(``NO_CONFIG``), nothing built per read, and merges to the region's defaults themselves.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.metadata.records.hubs import HubInfo
from hedwig.metadata.records.ledgers import LedgerMetadata, LedgerRanges
from hedwig.metadata.records.versions import Version, Versioned


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
    regions: tuple[str, ...] | None = None

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
        if self.regions is not None and not all(
            isinstance(r, str) and r and not any(c in r for c in "=;,/@ ") for r in self.regions
        ):
            raise MetadataError(f"regions must be region names, got {self.regions!r}")

    def to_json(self) -> bytes:
        return dump_object(self.to_object())

    def to_object(self) -> dict[str, Any]:
        """The settings made, as a plain object (a namespace's policy holds one)."""
        d: dict[str, Any] = {}
        if self.replication is not None:
            d["replication"] = asdict(self.replication)
        for name in self._NUMBERS:
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        if self.regions is not None:
            d["regions"] = list(self.regions)
        return d

    @classmethod
    def from_json(cls, raw: bytes) -> TopicConfig:
        if not raw or raw == b"{}":
            return NO_CONFIG  # most topics: one record for all, nothing built per read
        return cls.from_object(load_object(raw, "topic config"))

    @classmethod
    def from_object(cls, d: dict[str, Any]) -> TopicConfig:
        """Read back what ``to_object`` made (``MetadataError`` if it is not that)."""
        if not d:
            return NO_CONFIG
        try:
            rep = d.get("replication")
            regions = d.get("regions")
            return cls(
                replication=ReplicationConfig(**rep) if rep else None,
                **{name: d.get(name) for name in cls._NUMBERS},
                regions=tuple(regions) if isinstance(regions, list) else regions,
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
        return TopicConfig(
            replication=self.replication or defaults.replication,
            **numbers,
            regions=self.regions if self.regions is not None else defaults.regions,
        )


# A topic's configuration when it sets nothing: the region's defaults apply throughout.
NO_CONFIG = TopicConfig()
