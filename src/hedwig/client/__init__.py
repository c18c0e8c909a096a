"""The Hedwig client library: ``HedwigClient`` (asyncio) and ``SyncClient`` (threads).

``client`` is the facade; ``routing`` (connections, owners, redirects, retries),
``publisher`` (ordered batched publishing) and ``subscriber`` (one subscription) do the work;
``retry`` holds the backoff policy and ``sync`` the thread-based facade.
"""

from hedwig.client.facade import HedwigClient
from hedwig.client.publishing import BatchPublishResult, PublishResult
from hedwig.client.retry import RetryPolicy
from hedwig.client.subscribing import Subscriber
from hedwig.client.sync import SyncClient, SyncSubscriber
from hedwig.protocol import DeliveredMessage, Message, SubscribeMode

__all__ = [
    "BatchPublishResult",
    "DeliveredMessage",
    "HedwigClient",
    "Message",
    "PublishResult",
    "RetryPolicy",
    "SubscribeMode",
    "Subscriber",
    "SyncClient",
    "SyncSubscriber",
]
