"""``TopicCall``: a topic's callback as a zero-argument one, for stores that keep those.

An owner watch's callback is given the topic (``OwnershipManager.watch_owner``), so a hub can
pass one bound method for every topic it owns and a store that can call it with the topic
keeps nothing more per watch (ZooKeeper's watch function holds the topic itself). A store
whose watch record calls its entries without arguments (etcd's prefix watch, the memory
store's) keeps one of these instead: two slots, 48 bytes, a quarter of a closure.
"""

from __future__ import annotations

from collections.abc import Callable


class TopicCall:
    __slots__ = ("callback", "topic")

    def __init__(self, callback: Callable[[str], None], topic: str) -> None:
        self.callback = callback
        self.topic = topic

    def __call__(self) -> None:
        self.callback(self.topic)
