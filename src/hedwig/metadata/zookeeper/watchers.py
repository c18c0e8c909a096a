"""kazoo's record of the data watches it has set, kept small: one per owned topic.

kazoo (2.11) keeps the functions watching each znode in a ``defaultdict(set)`` keyed by path.
A hub watches the owner record of every topic it owns, each with its own function, so each
owned topic cost kazoo a set of one (216 bytes) besides the path and the function: about a
tenth of what an idle owned topic costs a hub, and the difference between a hub on ZooKeeper
and one on etcd (whose owner watches are entries of one dict). ``Watchers`` holds one
function in a slot and only makes a set for a second; ``LeanKazooClient`` keeps its data
watches in them. kazoo uses the record in four ways, all kept: ``record[path].add(watcher)``
when a watch is set, ``record.pop(path, [])`` when one fires, iteration over
``record.values()`` when the connection is lost (every watch fires), and a fresh record
after that (``_reset_watchers``, copied here from kazoo 2.11 with the record's type changed;
kazoo is pinned in ``pyproject.toml``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import Callback, EventType, WatchedEvent

Watcher = Callable[[Any], None]


class Watchers:
    """The functions watching one znode: the first in a slot, any others in a set."""

    __slots__ = ("first", "more")

    def __init__(self) -> None:
        self.first: Watcher | None = None
        self.more: set[Watcher] | None = None

    def add(self, watcher: Watcher) -> None:
        if self.first is None or self.first is watcher:
            self.first = watcher
        elif self.more is None:
            self.more = {watcher}
        else:
            self.more.add(watcher)

    def __iter__(self) -> Iterator[Watcher]:
        if self.first is not None:
            yield self.first
        if self.more:
            yield from self.more

    def __len__(self) -> int:
        return (self.first is not None) + len(self.more or ())


class WatcherRecord(dict[str, Watchers]):
    """Path to ``Watchers``, made on first use as ``defaultdict`` would."""

    __slots__ = ()

    def __missing__(self, path: str) -> Watchers:
        made = self[path] = Watchers()
        return made


class LeanKazooClient(KazooClient):  # type: ignore[misc]
    """A ``KazooClient`` whose data watches are kept in a ``WatcherRecord``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._data_watchers = WatcherRecord()

    def _reset_watchers(self) -> None:
        # kazoo 2.11's, with the data watches' record a WatcherRecord: every watch fires with
        # a NONE event (the connection is gone, and the server forgets its watches with it).
        watchers: list[Watcher] = []
        child_record: dict[str, set[Watcher]] = self._child_watchers
        for child_watchers in child_record.values():
            watchers.extend(child_watchers)
        for data_watchers in self._data_watchers.values():
            watchers.extend(data_watchers)
        self._child_watchers: defaultdict[str, set[Watcher]] = defaultdict(set)
        self._data_watchers = WatcherRecord()
        ev = WatchedEvent(EventType.NONE, self._state, None)
        for watch in watchers:
            self.handler.dispatch_callback(Callback("watch", watch, (ev,)))
