"""Subscribing: one subscription as the client sees it, attached wherever it is served.

A ``Subscriber`` per subscription, its parts one module each:

- ``subscriber``: the attachment, attached again by itself after failures and moves (its
  rules at the top);
- ``lanes``: a topic served by lanes, read by following its lanes' subscriptions;
- ``reading``: the caller's side, messages handed out in order and consumes sent back;
- ``inbox``: what was received and not handed out yet, a batch at a time.
"""

from hedwig.client.subscribing.subscriber import Subscriber

__all__ = ["Subscriber"]
