"""How a hub's request handlers are made from its parts (``hedwig.hub.process.hub``):
``HubRequests``, each handler given only the parts it serves with."""

from __future__ import annotations

from collections.abc import Callable

from hedwig.hub.front.access import AccessControl
from hedwig.hub.front.owners import SubscriptionOwners
from hedwig.hub.front.quotas import PublishQuotas
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import HubDialer
from hedwig.hub.replicating.replicator import RegionReplicator
from hedwig.hub.reporting.metrics import HubMetrics
from hedwig.hub.requests.moves import TopicMoves
from hedwig.hub.requests.owned import OwnedTopics
from hedwig.hub.requests.places import SubscriptionPlaces
from hedwig.hub.requests.routes import HubRequests
from hedwig.hub.requests.storage import StorageRequests
from hedwig.hub.requests.subscriptions import SubscriptionRequests
from hedwig.hub.requests.topics import TopicRequests
from hedwig.hub.spreading.fanout import FanOut
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.hub.spreading.plans import TopicPlans
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.managers import MetadataStore


def hub_requests(
    *,
    topics: TopicOwnership,
    fanout: FanOut,
    lanes: TopicLanes,
    plans: TopicPlans,
    access: AccessControl,
    store: MetadataStore,
    dialer: HubDialer,
    metrics: HubMetrics,
    storage: LocalStorage,
    replicator: RegionReplicator,
    quotas: PublishQuotas,
    address: Callable[[], str],
) -> HubRequests:
    owned = OwnedTopics(ownership=topics, fanout=fanout, access=access, store=store)
    # Whose each subscription is, and who may attach to, reset, delete and list it.
    owners = SubscriptionOwners(access=access, store=store)
    return HubRequests(
        owned=owned,
        topics=TopicRequests(
            owned=owned,
            fanout=fanout,
            lanes=lanes,
            events=metrics,
            owners=owners,
            links=replicator.describe,
            quotas=quotas,
        ),
        subscriptions=SubscriptionRequests(
            places=SubscriptionPlaces(owned=owned, fanout=fanout, plans=plans),
            lanes=lanes,
            owners=owners,
        ),
        moves=TopicMoves(ownership=topics, store=store, dialer=dialer, events=metrics),
        storage=StorageRequests(
            storage=storage,
            store=store,
            address=address,
            store_reachable=lambda: not topics.suspended,
        ),
    )
