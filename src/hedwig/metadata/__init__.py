"""Metadata managers (seed 002): ownership, persistence info, subscriptions, ledgers, hubs."""

from hedwig.metadata.managers import (
    HubRegistry,
    LedgerMetadataManager,
    MetadataSession,
    MetadataStore,
    SessionState,
    SubscriptionDataManager,
    TopicCatalog,
    TopicOwnershipManager,
    TopicPersistenceManager,
)
from hedwig.metadata.records import (
    ANY_VERSION,
    NEW_VERSION,
    HubInfo,
    HubLoad,
    HubStatus,
    LedgerMetadata,
    LedgerRange,
    LedgerRanges,
    LedgerState,
    ReplicationConfig,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    TopicConfig,
    TopicLoad,
    Version,
    Versioned,
)

__all__ = [
    "ANY_VERSION",
    "NEW_VERSION",
    "HubInfo",
    "HubLoad",
    "HubRegistry",
    "HubStatus",
    "LedgerMetadata",
    "LedgerMetadataManager",
    "LedgerRange",
    "LedgerRanges",
    "LedgerState",
    "MetadataSession",
    "MetadataStore",
    "ReplicationConfig",
    "SessionState",
    "SubscriptionData",
    "SubscriptionDataManager",
    "SubscriptionPreferences",
    "SubscriptionState",
    "TopicCatalog",
    "TopicConfig",
    "TopicLoad",
    "TopicOwnershipManager",
    "TopicPersistenceManager",
    "Version",
    "Versioned",
    "open_store",
]


def open_store(zk: str, region: str, *, session_timeout: float = 6.0) -> MetadataStore:
    """The default store for a ZooKeeper connection string."""
    from hedwig.metadata.zookeeper import ZkMetadataStore

    return ZkMetadataStore(zk, region, session_timeout=session_timeout)
