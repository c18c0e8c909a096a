"""The Hedwig client library: ``HedwigClient`` (asyncio) and ``SyncClient`` (threads)."""

from hedwig.client.client import HedwigClient, PublishResult, Subscriber
from hedwig.client.retry import RetryPolicy
from hedwig.client.sync import SyncClient, SyncSubscriber
from hedwig.protocol.frames import DeliveredMessage, Message, SubscribeMode

__all__ = [
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
