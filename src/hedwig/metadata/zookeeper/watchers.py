"""kazoo's record of the data watches it has set, kept small: one per owned topic.

kazoo (2.11) keeps the functions watching each znode in a ``defaultdict(set)`` keyed by path.
A hub watches the owner record of every topic it owns, each with its own function, so each
owned topic cost kazoo a set of one (216 bytes) and its own copy of the record's path (about
80) besides the function: a sixth of what an idle owned topic costs a hub, and the difference
between a hub on ZooKeeper and one on etcd (whose owner watches are entries of one dict, keyed
by the key's end). ``WatcherRecord`` keeps a lone watcher as the entry itself, and a
``Watchers`` (a slot, and a set only from the third) for several. A watcher that names its
path's end (``key``: the encoded topic name, a string its holder keeps anyway) is filed under
that end when the path is one of the record's kind (``<prefix><key><suffix>``, an owner
record), so the path is not kept twice.

kazoo uses the record in four ways, all kept: ``record[path].add(watcher)`` when a watch is
set, ``record.pop(path, [])`` when one fires, iteration over its watchers when the connection
is lost (every watch fires), and a fresh record after that (``_reset_watchers``, copied here
from kazoo 2.11 with the record's type changed; kazoo is pinned in ``pyproject.toml``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.states import Callback, EventType, WatchedEvent

from hedwig.metadata.zookeeper.sending import BatchingConnection, call

Watcher = Callable[[Any], None]


class Watchers:
    """The functions watching one znode, when there are several: the first in a slot, any
    others in a set."""

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


class _Adding:
    """What ``record[path]`` gives kazoo: something to ``add`` the path's watcher to."""

    __slots__ = ("path", "record")

    def __init__(self, record: WatcherRecord, path: str) -> None:
        self.record = record
        self.path = path

    def add(self, watcher: Watcher) -> None:
        self.record.add(self.path, watcher)


class WatcherRecord:
    """Path (or, for paths of the record's kind, their end) to a watcher or ``Watchers``."""

    __slots__ = ("_held", "prefix", "suffix")

    def __init__(self, prefix: str = "", suffix: str = "") -> None:
        self._held: dict[str, Watcher | Watchers] = {}
        self.prefix = prefix
        self.suffix = suffix

    def end(self, path: str) -> str | None:
        """The part of ``path`` between the prefix and the suffix, if it is of this kind."""
        prefix, suffix = self.prefix, self.suffix
        if not prefix or len(path) <= len(prefix) + len(suffix):
            return None
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return None
        end = path[len(prefix) : len(path) - len(suffix)]
        return None if "/" in end else end

    def __getitem__(self, path: str) -> _Adding:
        return _Adding(self, path)

    def add(self, path: str, watcher: Watcher) -> None:
        key = getattr(watcher, "key", None)
        if key is None or self.end(path) != key:
            key = path
        held = self._held.get(key)
        if held is None or held is watcher:
            self._held[key] = watcher
        elif isinstance(held, Watchers):
            held.add(watcher)
        else:
            several = self._held[key] = Watchers()
            several.add(held)
            several.add(watcher)

    def pop(self, path: str, default: Iterable[Watcher] = ()) -> list[Watcher]:
        """Every watcher of ``path``, no longer recorded (``default``'s if there is none)."""
        got = [w for key in self._keys(path) for w in _each(self._held.pop(key, None))]
        return got or list(default)

    def watching(self, path: str) -> list[Watcher]:
        """``path``'s watchers, left recorded."""
        return [w for key in self._keys(path) for w in _each(self._held.get(key))]

    def watchers(self) -> Iterator[Watcher]:
        for held in self._held.values():
            yield from _each(held)

    def _keys(self, path: str) -> tuple[str, ...]:
        end = self.end(path)
        return (path,) if end is None else (end, path)

    def __len__(self) -> int:
        return len(self._held)

    def keys(self) -> list[str]:
        return list(self._held)


def _each(held: Watcher | Watchers | None) -> Iterable[Watcher]:
    if held is None:
        return ()
    return held if isinstance(held, Watchers) else (held,)


class LeanKazooClient(KazooClient):  # type: ignore[misc]
    """A ``KazooClient`` whose data watches are kept in a ``WatcherRecord``; watchers of
    ``<prefix><key><suffix>`` are filed under their ``key`` (``file_by_end``); and whose
    requests go to ZooKeeper many at a time (``hedwig.metadata.zookeeper.sending``)."""

    # A WatcherRecord from kazoo's ``__init__`` on: it calls ``_reset_watchers`` (below).
    _data_watchers: WatcherRecord

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # kazoo's handler as kazoo made it, sending as ``BatchingConnection`` does (its
        # methods only: the same attributes, so the instance changes class in place).
        self._connection.__class__ = BatchingConnection

    def _call(self, request: Any, async_object: Any) -> bool | None:
        return call(self, request, async_object)

    def file_by_end(self, prefix: str, suffix: str) -> None:
        """Watchers of paths ``prefix + key + suffix`` that carry their ``key`` are filed by it
        (``prefix`` as the caller writes paths: the client's chroot is added here)."""
        self._data_watchers.prefix = self.chroot + prefix
        self._data_watchers.suffix = suffix

    def _reset_watchers(self) -> None:
        # kazoo 2.11's, with the data watches' record a WatcherRecord: every watch fires with
        # a NONE event (the connection is gone, and the server forgets its watches with it).
        watchers: list[Watcher] = []
        child_record: dict[str, set[Watcher]] = self._child_watchers
        for child_watchers in child_record.values():
            watchers.extend(child_watchers)
        old: WatcherRecord | defaultdict[str, set[Watcher]] = self._data_watchers
        if isinstance(old, WatcherRecord):
            watchers.extend(old.watchers())
            fresh = WatcherRecord(old.prefix, old.suffix)
        else:  # kazoo's own, made in its ``__init__`` just before it calls this
            fresh = WatcherRecord()
        self._child_watchers: defaultdict[str, set[Watcher]] = defaultdict(set)
        self._data_watchers = fresh
        ev = WatchedEvent(EventType.NONE, self._state, None)
        for watch in watchers:
            self.handler.dispatch_callback(Callback("watch", watch, (ev,)))
