"""The Hedwig client library: ``HedwigClient`` (asyncio) and ``SyncClient`` (threads).

Where things are, by folder and module:

- ``facade``: ``HedwigClient`` itself, its options and what hubs push (``facade.client``) and
  its calls by what they do (``publish``, ``subscribe``, ``admin``);
- ``routing``: connections, which hub owns which topic, redirects and retries; ``owners``
  the index of owners it keeps, ``routes`` the keys it keeps them under;
- ``publishing``: one topic's ordered, batched, pipelined publisher (queue, gate, results);
- ``subscribing``: one subscription, attached again by itself after failures and moves;
- ``retry``: the backoff policy; ``sync``: the thread-based facade.
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
