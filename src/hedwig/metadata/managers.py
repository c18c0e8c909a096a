"""The metadata managers, as interfaces any store can implement (``docs/architecture.md``,
"Metadata").

Every write takes the version the writer last read and fails with ``BadVersionError`` if the
store holds another: this compare-and-set is what keeps two hubs from both believing their
update won. ``NEW_VERSION`` creates, ``ANY_VERSION`` skips the check (tools and tests only).

Hubs need two things the original design leaves to ZooKeeper and which a second store must
also provide:
``HubRegistry`` (which hubs are alive, with their load) and ``MetadataSession`` (the hub's
liveness lease: when it is lost, every ephemeral record of the hub is gone and the hub must stop
acting as an owner at once). ``tests/metadata_conformance.py`` is the suite every
implementation must pass.

**Ownership is bound to the owner's liveness**, in either of the two ways the design document
allows: session-bound (ZooKeeper: the owner record is an ephemeral znode of the hub's session)
or lease-bound (etcd: a record written by compare-and-set and attached to a lease the hub keeps
alive; when the lease expires the store deletes the record and the topic is free). Either way
the store reports the loss to the hub as ``SessionState.LOST``, and ledger fencing keeps a hub
that has not noticed yet from acknowledging anything: the next owner fences the ledger before
it writes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from enum import Enum
from typing import Protocol

from hedwig.metadata.acls import AclEntry
from hedwig.metadata.bundles import BundleClaim, BundleMap
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import (
    HubInfo,
    HubLoad,
    HubStatus,
    LedgerMetadata,
    LedgerRanges,
    SubscriptionData,
    TopicClaim,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.records.namespaces import NamespacePolicy


class TopicOwnershipManager(Protocol):
    async def read_owner_info(self, topic: str) -> Versioned[HubInfo] | None:
        """The owner record and its version, or ``None`` if nobody owns the topic."""
        ...

    async def write_owner_info(self, topic: str, owner: HubInfo, version: Version) -> Version:
        """Claim (``NEW_VERSION``) or update the owner record; ``BadVersionError`` on conflict.

        A claimed record is tied to the writer's session or lease (``MetadataSession``): it
        disappears when the session ends or the lease expires.
        ``NoTopicOwnerInfoError`` if updating a record that does not exist.
        """
        ...

    async def delete_owner_info(self, topic: str, version: Version) -> None:
        """Release; ``BadVersionError`` if the record changed, ``NoTopicOwnerInfoError`` if gone."""
        ...

    async def claim_topic(
        self, topic: str, owner: HubInfo, first: LedgerMetadata | None = None
    ) -> TopicClaim:
        """Claim ``topic`` for ``owner`` in as few store requests as the store allows: create
        the topic with its owner record if neither exists (one request: a first publish's
        claim), else write the record (as ``write_owner_info`` with ``NEW_VERSION``) if no
        hub's is there (a take-over: two on etcd and ZooKeeper), else write nothing and tell
        whose record is in the way (read in the failed request where the store can: etcd).
        The record is a claim like any other: gone with its writer's session or lease.

        ``first``: a topic this claim creates gets its first ledger (given its id here) and
        the persistence record naming it in the same request, as ``start_topic_log`` makes
        them (``TopicClaim.log``): a first publish's claim and log in one request, not two.
        Not used when the topic exists."""
        ...

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        """Call ``callback(topic)`` (once, on the event loop) when the owner record changes or
        goes. Given the topic, one callback serves every topic (a hub's one bound method), and
        a watch costs only the store's record of it: a hub watches every topic it owns.

        Also called at once if the record is already gone when the watch is set. ``version``:
        the record's version as the caller last saw it (written or read) through this store;
        a store may watch from there without reading the record again, and a change since
        fires at once. A version learned elsewhere (another store's write) may be one this
        store has not seen yet, and may fire at once too (ZooKeeper's sessions are apart).
        """
        ...


class TopicPersistenceManager(Protocol):
    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None: ...

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        """CAS write; ``NEW_VERSION`` creates. ``NoTopicPersistenceInfoError`` if missing."""
        ...

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None: ...

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        """A new topic's first ledger (``first``, given its id here) and the persistence
        record naming it from sequence 1, both created: the ledger's metadata and the
        record's version. ``BadVersionError`` if the topic has a record already (and no
        ledger is left behind). In one request where the store allows
        (``hedwig.metadata.topic_logs``)."""
        ...

    async def create_topic_with_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version] | None:
        """The topic made (as ``TopicCatalog.ensure_topic``) with its log started (as
        ``start_topic_log``), in one request where the store allows: what a hub owning by
        bundle writes for a new topic of a bundle it owns (no owner record of its own).
        ``None`` if the topic exists (nothing of it is written then)."""
        ...

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        """A taken-over topic's log moved on, all at once or not at all: each of ``closed``
        (ledgers its recovery closed) written at its version, ``following`` created (given its
        id here), and the persistence record (``ranges``, as it is to be with those ledgers
        closed, at the version it was read) written with ``following`` as its tail from the
        sequence after its last. Returns the new ledger's metadata and the record.
        ``BadVersionError`` if any of these records changed (nothing is written then): the
        caller takes the steps one by one, each settling its own race."""
        ...


class SubscriptionDataManager(Protocol):
    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        """``SubscriptionExistsError`` if the subscription exists."""
        ...

    def is_partial_update_supported(self) -> bool:
        """True if ``update_subscription_data`` may carry only the changed part."""
        ...

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        """Partial update: parts left ``None`` in ``data`` keep their stored value.

        Stores without partial updates must still accept a complete record here.
        """
        ...

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version: ...

    async def delete_subscription_data(
        self, topic: str, subscriber: str, version: Version
    ) -> None: ...

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None: ...

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]: ...


class LedgerMetadataManager(Protocol):
    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        """Store new ledger metadata under a fresh unique id (``metadata.ledger_id`` ignored)."""
        ...

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None: ...

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version: ...

    async def delete_ledger(self, ledger_id: int, version: Version) -> None: ...

    async def list_ledgers(self) -> list[int]: ...

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        """Whether ledger ``ledger_id`` of ``topic`` can never be named by the topic's log.

        Whoever makes a ledger (a claim, a roll-over) names it in the topic's persistence
        record by a compare-and-set against the version it read before making it. If the
        record does not name the ledger and was last written after the ledger was made, that
        compare-and-set can only fail: the ledger was left over by a claim or a collection
        cut short, and may go. Each store answers from its own order of writes (etcd
        revisions, ZooKeeper zxids), never from clocks. False if the record names the
        ledger, was last written before it was made, or either is gone (a topic without a
        record proves nothing: its next claim may still create one)."""
        ...


class TopicCatalog(Protocol):
    """Topics that exist (a topic exists once its node does; topics are created lazily)."""

    async def ensure_topic(self, topic: str) -> bool:
        """Create the topic's node and subscriber root if missing (lazy topic creation).

        True only if this call created the topic, so that nothing else of it existed a moment
        ago (no owner, configuration, persistence or subscriptions: a topic's records go with
        it): a hub claiming a topic it has just created skips reading them. False when it
        existed, and when the outcome is unknown (a write retried after a lost answer)."""
        ...

    async def topic_exists(self, topic: str) -> bool: ...

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None: ...

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version: ...

    async def list_topics(self) -> list[str]: ...

    async def delete_topic(self, topic: str) -> None:
        """Remove the topic and everything under it (its ledgers' metadata excepted)."""
        ...

    async def read_region_defaults(self) -> TopicConfig: ...

    async def write_region_defaults(self, config: TopicConfig) -> None: ...


class HubRegistry(Protocol):
    async def register_hub(self, address: str, load: HubLoad) -> int:
        """Mark the hub alive for the current session; returns its epoch (unique per session)."""
        ...

    async def update_load(self, address: str, load: HubLoad) -> None: ...

    async def unregister_hub(self, address: str) -> None:
        """Remove the hub's alive record (it stays registered as a member)."""
        ...

    async def list_hubs(self) -> list[HubStatus]: ...

    async def alive_epoch(self, address: str) -> int | None:
        """The epoch of the hub's alive record, read now; None if it has none (its session
        ended, or it unregistered). One read, where ``list_hubs`` reads every member's."""
        ...


class AclManager(Protocol):
    """The region's access control entries (``hedwig.metadata.acls``), by name."""

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        """Every entry. With ``watch``, it is called once (on the loop) at the first change
        after this read: an entry written, created or deleted."""
        ...

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None: ...

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        """Create (``NEW_VERSION``), overwrite (``ANY_VERSION``) or compare-and-set."""
        ...

    async def delete_acl(self, name: str, version: Version) -> None:
        """``MetadataError`` if there is no such entry."""
        ...


class NamespaceManager(Protocol):
    """Namespaces' policies (``NamespacePolicy``), by ``tenant/namespace``
    (``hedwig.protocol.names.namespace_name``; any other name is refused), and the count of
    each namespace's topics: a marker per topic counted and the count, written together in
    one transaction, so hubs creating topics of one namespace at once count each exactly."""

    async def list_namespaces(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[NamespacePolicy]]:
        """Every policy. With ``watch``, it is called once (on the loop) at the first change
        after this read: a policy written, created or deleted."""
        ...

    async def read_namespace(self, name: str) -> Versioned[NamespacePolicy] | None: ...

    async def write_namespace(
        self, name: str, policy: NamespacePolicy, version: Version
    ) -> Version:
        """Create (``NEW_VERSION``), overwrite (``ANY_VERSION``) or compare-and-set."""
        ...

    async def delete_namespace(self, name: str, version: Version) -> None:
        """The policy (not the count); ``MetadataError`` if there is none."""
        ...

    async def topic_count(self, name: str) -> int:
        """Topics counted in the namespace."""
        ...

    async def count_topic(self, name: str, topic: str, limit: int | None) -> int:
        """Count ``topic`` in namespace ``name`` (its marker made and the count raised by one,
        in one transaction), unless it is counted already; the count after. Refused with
        ``QuotaExceededError`` (nothing written) if it is not and the count is at ``limit``."""
        ...

    async def uncount_topic(self, name: str, topic: str) -> None:
        """``topic``'s marker gone and the count lowered by one, in one transaction; nothing
        if it was not counted."""
        ...


class TopicPlanManager(Protocol):
    """Topics' plans (``hedwig.metadata.plans``); no record means ``single``."""

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        """Every topic that has a plan record (a topic not listed has none). With ``watch``,
        it is called once (on the loop) at the next change of that set after this read: a
        plan created or deleted, or a planned topic deleted. It may also fire for a plan's
        change or without a change (a reader then reads again)."""
        ...

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        """The plan and its version, or ``None``. With ``watch``, it is called once (on the
        loop) at the next change after this read: the record written, created or deleted, or
        the topic deleted."""
        ...

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        """Compare-and-set (``NEW_VERSION`` creates; ``BadVersionError`` on conflict).
        ``MetadataError`` if the topic does not exist, or if updating a plan that does not."""
        ...

    async def delete_plan(self, topic: str, version: Version) -> None:
        """Back to ``single``; ``BadVersionError`` on conflict, ``MetadataError`` if none."""
        ...


class BundleManager(Protocol):
    """The region's bundle map (``hedwig.metadata.bundles``) and its bundles' owner records.

    A bundle's owner record is a claim like a topic's: created test-and-set, tied to the
    claimer's session or lease (gone when it ends), deleted at its version to release. It is
    only ever created and deleted, never rewritten, so the set of owned bundles changes with
    every change of any owner (what ``bundle_owners``'s watch follows). Bundles are named as
    ``Bundle.name`` has it; any other name is refused (``UsageError``) before the store is
    asked."""

    async def read_bundle_map(
        self, watch: Callable[[], None] | None = None
    ) -> Versioned[BundleMap] | None:
        """The map and its version, or ``None`` (a region that has none yet). With ``watch``,
        it is called once (on the loop) at the next change after this read."""
        ...

    async def write_bundle_map(self, bundles: BundleMap, version: Version) -> Version:
        """Compare-and-set of the whole map (``NEW_VERSION`` creates); ``BadVersionError`` on
        conflict (another hub's split or merge came first: read again, decide again)."""
        ...

    async def claim_bundle(self, bundle: str, owner: HubInfo) -> BundleClaim:
        """Create ``bundle``'s owner record for ``owner`` unless one is there; refused, the
        claim names the record in the way (read in the same request where the store can)."""
        ...

    async def read_bundle_owner(self, bundle: str) -> Versioned[HubInfo] | None: ...

    async def release_bundle(self, bundle: str, version: Version) -> None:
        """Delete the owner record at ``version``; ``BadVersionError`` if it changed,
        ``NoTopicOwnerInfoError`` (naming the bundle) if it is gone."""
        ...

    async def bundle_owners(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[HubInfo]]:
        """Every owned bundle's owner record, by bundle name, in as few reads as the store
        allows (one range read on etcd). With ``watch``, it is called once (on the loop) at
        the next claim or release of any bundle after this read."""
        ...

    def watch_bundle_owner(
        self, bundle: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        """Call ``callback(bundle)`` once (on the loop) when the bundle's owner record goes
        or changes, at once if it is gone already or no longer at ``version``."""
        ...


class SessionState(Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"  # connection lost, session may still be alive
    LOST = "lost"  # session expired: every ephemeral record of ours is gone


class MetadataSession(Protocol):
    @property
    def state(self) -> SessionState: ...

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        """Called on the event loop at every state change."""
        ...


class MetadataStore(Protocol):
    """One store holding every kind of metadata of one region."""

    region: str

    # Read-only, so a store may expose its own manager classes (which conform to these).
    @property
    def ownership(self) -> TopicOwnershipManager: ...

    @property
    def persistence(self) -> TopicPersistenceManager: ...

    @property
    def subscriptions(self) -> SubscriptionDataManager: ...

    @property
    def ledgers(self) -> LedgerMetadataManager: ...

    @property
    def topics(self) -> TopicCatalog: ...

    @property
    def hubs(self) -> HubRegistry: ...

    @property
    def acls(self) -> AclManager: ...

    @property
    def plans(self) -> TopicPlanManager: ...

    @property
    def namespaces(self) -> NamespaceManager: ...

    @property
    def bundles(self) -> BundleManager: ...

    @property
    def session(self) -> MetadataSession: ...

    async def start(self) -> None: ...

    async def close(self) -> None: ...

    async def __aenter__(self) -> MetadataStore:
        """Start the store; ``async with open_store(...) as store`` closes it afterwards."""
        ...

    async def __aexit__(self, *exc: object) -> None: ...
