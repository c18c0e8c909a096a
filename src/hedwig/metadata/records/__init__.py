"""Records kept in the metadata store, immutable and validated when built.

Each record serialises to compact JSON (``to_json``) and back (``from_json``), through
``msgspec`` (``encoding`` says why). Where they are, one module each:

- ``versions``: a record's version for compare-and-set (``Version``, ``Versioned``);
- ``hubs``: who owns a topic (``HubInfo``) and what hubs report (``HubLoad``, ``TopicLoad``,
  ``HubStatus``);
- ``topics``: a topic's configuration (``TopicConfig``, ``ReplicationConfig``) and what a claim
  of it did (``TopicClaim``);
- ``ledgers``: a topic's ledgers (``LedgerRanges``) and each ledger's metadata
  (``LedgerMetadata``);
- ``subscriptions``: a subscription's preferences and state (``SubscriptionData``);
- ``encoding``: the JSON, read and written by ``msgspec``.

Every record is importable from here, as from the single module this package once was.
"""

from hedwig.metadata.records.hubs import HubInfo, HubLoad, HubStatus, TopicLoad
from hedwig.metadata.records.ledgers import LedgerMetadata, LedgerRange, LedgerRanges, LedgerState
from hedwig.metadata.records.subscriptions import (
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
)
from hedwig.metadata.records.topics import NO_CONFIG, ReplicationConfig, TopicClaim, TopicConfig
from hedwig.metadata.records.versions import ANY_VERSION, NEW_VERSION, Version, Versioned

__all__ = [
    "ANY_VERSION",
    "NEW_VERSION",
    "NO_CONFIG",
    "HubInfo",
    "HubLoad",
    "HubStatus",
    "LedgerMetadata",
    "LedgerRange",
    "LedgerRanges",
    "LedgerState",
    "ReplicationConfig",
    "SubscriptionData",
    "SubscriptionPreferences",
    "SubscriptionState",
    "TopicClaim",
    "TopicConfig",
    "TopicLoad",
    "Version",
    "Versioned",
]
