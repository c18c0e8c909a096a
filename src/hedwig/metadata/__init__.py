"""Metadata managers: ownership, persistence info, subscriptions, ledgers, hubs.

``docs/architecture.md`` ("Metadata") and ``docs/zookeeper-layout.md`` describe them.
"""

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
    TopicPlanManager,
)
from hedwig.metadata.opening import EtcdAccess, open_store
from hedwig.metadata.plans import PlanMode, TopicPlan
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
    "EtcdAccess",
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
    "PlanMode",
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
    "TopicPlan",
    "TopicPlanManager",
    "Version",
    "Versioned",
    "open_store",
]
