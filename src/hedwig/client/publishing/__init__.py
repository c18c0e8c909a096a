"""Publishing to a topic: ordered, batched and pipelined, each message stored once.

A ``TopicPublisher`` per topic holds what is published to it until it is durable. Its parts,
one module each:

- ``queue``: the messages waiting to be cut into a batch, and who waits on them (the hot path:
  a message is queued with two appends, a batch cut with two slices);
- ``waiters``: a message's waiter (its future, nobody for ``send``, or a chunk of a
  ``publish_batch`` call) and how a settled batch tells them;
- ``results``: what the callers get back (``PublishResult``, ``BatchPublishResult``);
- ``sends``: the failures of messages nobody waits on, kept for ``flush`` to raise;
- ``chunks``: ``publish_batch``'s messages checked, encoded and cut into chunks;
- ``batch``: a batch on its way, and its outcome;
- ``gate``: when the next batch may be cut and go out (the state table that keeps the order);
- ``publisher``: the cutting and sending, the told order, identities and lanes.
"""

from hedwig.client.publishing.chunks import chunk_messages
from hedwig.client.publishing.publisher import BatchLimits, TopicPublisher
from hedwig.client.publishing.results import BatchPublishResult, PublishResult

__all__ = [
    "BatchLimits",
    "BatchPublishResult",
    "PublishResult",
    "TopicPublisher",
    "chunk_messages",
]
