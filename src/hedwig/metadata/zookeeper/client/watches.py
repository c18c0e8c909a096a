"""Watches: which watchers wait on which znodes, how they are set on the server, many to a
request, and when they fire.

The record (``WatchRecord``) is kept as ZooKeeper's own client keeps it: data watches (set
by a read, or by ``SetWatches``), exist watches (set by an ``exists`` that found nothing),
child watches (by a listing). A notification fires and forgets the watchers of its znode
that its kind concerns (a change: data and exist watchers; a deletion: all three; a new
child: child watchers), on the event loop, each once. A watcher is any callable taking the
event (``None`` when it fires for another reason); ``OneShot`` calls a callback once however
many of its watches fire, and can carry the argument to call it with, so one callback serves
every topic a hub owns.

Rules:

- A watch on a znode is set (``Watches.set``) with the others set in the same turn of the
  loop, in one ``SetWatches`` of up to ``MAX_WATCHES`` paths (the request ZooKeeper's clients
  send as they reconnect), not an ``exists`` each (nine in ten of ZooKeeper's requests in a
  failover were those). The server sets a data watch on each path, or notifies at once for
  one that is gone or changed after the zxid given (the latest this client has seen). The
  watchers go into the record before the request is sent, so none can miss its notification.
- A change between a caller's read of a record and that zxid would not be notified, so a
  watch that expects a version (the one its holder wrote or read) is read back once set, in
  one ``multiRead`` for the request's: a record gone or at another version fires its watcher.
- That zxid is the latest an answer to this session carried (a notification carries none
  before ZooKeeper 3.9), so a version the holder wrote or read through the session is never
  past it, and its watch waits for the next change. A version another session wrote, that
  this one has not yet seen answered, may be past it: the server fires that watch at once
  ("look again"; in an ensemble this session's server may not have the write yet either).
- Watches outlive connections: while the session is suspended a watch set is kept in the
  record, unfired, and every watch of the record is set again on the session's next
  connection, before any request, in ``SetWatches`` of up to 128 KiB of paths (as
  ``ClientCnxn`` does: ZooKeeper refuses a request above its 1 MiB ``jute.maxbuffer``); the
  server notifies then whatever changed while the client was away. Read-backs the lost
  connection cut short are made on the next one.
- When the session expires every watcher fires: its holder reads again, on the new session,
  and watches again there.
- An owner record's watch is filed by its topic's (encoded) name, not a path of its own: a
  hub watches every topic it owns, and the path would cost a string per topic
  (``WatchRecord.file_by_end``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from enum import Enum
from typing import Any, NamedTuple

from hedwig.errors import MetadataUnavailableError
from hedwig.metadata.zookeeper.client.channel import Channel
from hedwig.metadata.zookeeper.client.codes import CONNECTION_LOSS, EventType
from hedwig.metadata.zookeeper.client.connection import Connection
from hedwig.metadata.zookeeper.client.reads import GroupResult, Reads
from hedwig.metadata.zookeeper.client.records import SetWatchesRequest, WatcherEvent

log = logging.getLogger(__name__)

# New watches set in one request at most. An owner record's path is about 80 bytes.
MAX_WATCHES = 512
# Bytes of paths in one ``SetWatches`` of a reconnection (``ClientCnxn``'s bound).
RESET_BYTES = 128 << 10

Watcher = Callable[[WatcherEvent | None], None]


class Kind(Enum):
    DATA = "data"
    EXIST = "exist"
    CHILD = "child"


# Which watchers each notification fires (``ZKWatchManager.materialize``).
FIRES: dict[int, tuple[Kind, ...]] = {
    EventType.CREATED: (Kind.DATA, Kind.EXIST),
    EventType.DATA_CHANGED: (Kind.DATA, Kind.EXIST),
    EventType.CHILDREN_CHANGED: (Kind.CHILD,),
    EventType.DELETED: (Kind.DATA, Kind.EXIST, Kind.CHILD),
}

_NO_ARG: Any = object()


class OneShot:
    """Runs ``callback`` (with ``arg``, if given) once, however many of its watches fire;
    the callback is let go when it runs. ``key``: the end of its path the record may file it
    by (``WatchRecord.file_by_end``). Three slots: a hub keeps one per owned topic."""

    __slots__ = ("arg", "callback", "key")

    def __init__(
        self, callback: Callable[..., None], arg: Any = _NO_ARG, key: str | None = None
    ) -> None:
        self.callback: Callable[..., None] | None = callback
        self.arg = arg
        self.key = key

    def __call__(self, _event: WatcherEvent | None) -> None:
        callback = self.callback
        if callback is not None:
            self.callback = None
            if self.arg is _NO_ARG:
                callback()
            else:
                callback(self.arg)


class _Several:
    """The watchers of one znode when there are several: the first in a slot, others in a
    set (each once)."""

    __slots__ = ("first", "more")

    def __init__(self, first: Watcher) -> None:
        self.first: Watcher | None = first
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


class _Held:
    """One kind's watchers, by path (or by end, for paths of the filed kind)."""

    __slots__ = ("by_end", "by_path")

    def __init__(self) -> None:
        self.by_path: dict[str, Watcher | _Several] = {}
        self.by_end: dict[str, Watcher | _Several] = {}

    @staticmethod
    def _add(held: dict[str, Watcher | _Several], key: str, watcher: Watcher) -> None:
        there = held.get(key)
        if there is None or there is watcher:
            held[key] = watcher
        elif isinstance(there, _Several):
            there.add(watcher)
        else:
            several = held[key] = _Several(there)
            several.add(watcher)


def _each(held: Watcher | _Several | None) -> list[Watcher]:
    if held is None:
        return []
    return list(held) if isinstance(held, _Several) else [held]


class WatchRecord:
    """Every watcher waiting, by kind and znode (see the module docstring)."""

    def __init__(self) -> None:
        self._held = {kind: _Held() for kind in Kind}
        self.prefix = ""
        self.suffix = ""

    def file_by_end(self, prefix: str, suffix: str) -> None:
        """Data watchers of ``prefix + key + suffix`` that carry their ``key`` (``OneShot``)
        are filed by it (the holder keeps the string anyway)."""
        self.prefix, self.suffix = prefix, suffix

    def _end(self, path: str) -> str | None:
        prefix, suffix = self.prefix, self.suffix
        if not prefix or len(path) <= len(prefix) + len(suffix):
            return None
        if not (path.startswith(prefix) and path.endswith(suffix)):
            return None
        end = path[len(prefix) : len(path) - len(suffix)]
        return None if "/" in end else end

    def add(self, kind: Kind, path: str, watcher: Watcher) -> None:
        held = self._held[kind]
        key = getattr(watcher, "key", None) if kind is Kind.DATA else None
        if key is not None and self._end(path) == key:
            held._add(held.by_end, key, watcher)
        else:
            held._add(held.by_path, path, watcher)

    def _places(self, kind: Kind, path: str) -> list[tuple[dict[str, Any], str]]:
        held = self._held[kind]
        places = [(held.by_path, path)]
        if kind is Kind.DATA:
            end = self._end(path)
            if end is not None:
                places.append((held.by_end, end))
        return places

    def pop(self, kind: Kind, path: str) -> list[Watcher]:
        """``path``'s watchers of ``kind``, no longer recorded."""
        return [w for held, key in self._places(kind, path) for w in _each(held.pop(key, None))]

    def discard(self, kind: Kind, path: str, watcher: Watcher) -> None:
        """``watcher`` no longer recorded on ``path`` (the others stay)."""
        for held, key in self._places(kind, path):
            there = held.get(key)
            if there is watcher:
                del held[key]
            elif isinstance(there, _Several):
                rest = [w for w in there if w is not watcher]
                if len(rest) != len(list(there)):
                    del held[key]
                    for w in rest:
                        _Held._add(held, key, w)

    def watching(self, path: str, kind: Kind = Kind.DATA) -> list[Watcher]:
        """``path``'s watchers of ``kind``, left recorded."""
        return [w for held, key in self._places(kind, path) for w in _each(held.get(key))]

    def fired(self, event: WatcherEvent) -> list[Watcher]:
        """The watchers ``event`` fires, no longer recorded."""
        return [w for kind in FIRES.get(event.type, ()) for w in self.pop(kind, event.path)]

    def keys(self, kind: Kind = Kind.DATA) -> list[str]:
        """What ``kind``'s watchers are filed by: paths, and ends of the filed kind."""
        held = self._held[kind]
        return [*held.by_path, *held.by_end]

    def paths(self, kind: Kind) -> Iterator[str]:
        held = self._held[kind]
        yield from held.by_path
        for end in held.by_end:
            yield self.prefix + end + self.suffix

    def clear(self) -> list[Watcher]:
        """Every watcher, none recorded any more."""
        out: list[Watcher] = []
        for held in self._held.values():
            for table in (held.by_path, held.by_end):
                for there in table.values():
                    out.extend(_each(there))
                table.clear()
        return out

    def __len__(self) -> int:
        """Znodes watched (of every kind)."""
        return sum(len(h.by_path) + len(h.by_end) for h in self._held.values())


class _Watch(NamedTuple):
    path: str
    watcher: Watcher
    version: int | None  # the version its holder expects the record at


def fire(watchers: Sequence[Watcher], event: WatcherEvent | None = None) -> None:
    for watcher in watchers:
        try:
            watcher(event)
        except Exception:  # one broken watcher must not keep the others from firing
            log.exception("a ZooKeeper watcher failed")


def _at(read: object, version: int | None) -> bool:
    """Whether a read-back found the record at ``version``."""
    return isinstance(read, tuple) and read[1].version == version


class Watches:
    """The watches of one session (see the module docstring)."""

    def __init__(self, channel: Channel, reads: Reads) -> None:
        self._channel = channel
        self._reads = reads
        self.record = WatchRecord()
        self._group: list[_Watch] = []  # set this turn, to go in one request
        self._unverified: list[_Watch] = []  # set, their version still to be read back
        self._closed = False

    def set(self, path: str, watcher: Watcher, version: int | None = None) -> None:
        """A data watch on ``path`` (see the module docstring)."""
        if self._closed:
            return
        watch = _Watch(path, watcher, version)
        if not self._channel.keeper.connected:
            # Kept, unfired: set with the others on the next connection, read back then.
            self.record.add(Kind.DATA, path, watcher)
            if version is not None:
                self._unverified.append(watch)
            return
        group = self._group
        group.append(watch)
        if len(group) == 1:
            self._channel.at_turn_end(self._send_group)
        elif len(group) >= MAX_WATCHES:
            self._send_group()

    def _send_group(self) -> None:
        group, self._group = self._group, []
        if not group:  # sent already: the turn filled a request
            return
        record = self.record
        for watch in group:  # before the server can notify them
            record.add(Kind.DATA, watch.path, watch.watcher)
        expecting = [w for w in group if w.version is not None]
        request = SetWatchesRequest(
            self._channel.keeper.last_zxid, tuple(w.path for w in group), (), ()
        )

        def answered(err: int, _result: object) -> None:
            if err == 0:
                self._read_back(expecting)
            elif err == CONNECTION_LOSS:  # set again, and read back, on the next connection
                self._unverified.extend(expecting)
            else:
                log.warning("ZooKeeper refused to set %d watches (error %d)", len(group), err)
                self._refused(group)

        self._channel.send(request, answered)

    def _refused(self, watches: Sequence[_Watch]) -> None:
        """Each fires: its holder reads again, and watches again."""
        for watch in watches:
            self.record.discard(Kind.DATA, watch.path, watch.watcher)
        fire([w.watcher for w in watches])

    def _read_back(self, watches: Sequence[_Watch]) -> None:
        """One ``multiRead`` for the watches of one ``SetWatches``."""
        for start in range(0, len(watches), MAX_WATCHES):
            chunk = watches[start : start + MAX_WATCHES]
            self._reads.read_group([w.path for w in chunk], functools.partial(self._check, chunk))

    def _check(self, watches: Sequence[_Watch], got: GroupResult) -> None:
        """Each record as read once its watch was set: gone or at another version, its
        watcher fires; a read the connection's loss cut short is made on the next one."""
        moved: list[_Watch] = []
        for watch, read in zip(watches, got, strict=True):
            if isinstance(read, MetadataUnavailableError):
                self._unverified.append(watch)
            elif not _at(read, watch.version):
                moved.append(watch)
        if moved:
            self._refused(moved)

    # the session's side ---------------------------------------------------------------------

    def primed(self, connection: Connection, last_zxid: int) -> None:
        """Every watch of the record set again on a new connection of the session."""
        record = self.record
        kinds = (Kind.DATA, Kind.EXIST, Kind.CHILD)
        batch: dict[Kind, list[str]] = {k: [] for k in kinds}
        size = 0
        for kind in kinds:
            for path in record.paths(kind):
                batch[kind].append(path)
                size += len(path)
                if size >= RESET_BYTES:
                    self._reset(connection, last_zxid, batch)
                    batch, size = {k: [] for k in kinds}, 0
        if size:
            self._reset(connection, last_zxid, batch)

    def _reset(self, connection: Connection, last_zxid: int, batch: dict[Kind, list[str]]) -> None:
        request = SetWatchesRequest(
            last_zxid,
            tuple(batch[Kind.DATA]),
            tuple(batch[Kind.EXIST]),
            tuple(batch[Kind.CHILD]),
        )

        def answered(err: int, _result: object) -> None:
            if err and err != CONNECTION_LOSS:  # never left unfired: their holders read again
                log.warning("ZooKeeper refused to set watches again (error %d)", err)
                record = self.record
                fire(
                    [w for kind, paths in batch.items() for p in paths for w in record.pop(kind, p)]
                )

        connection.send(request, answered)

    def connected(self) -> None:
        """The session is connected again: read back what the lost connection left."""
        unverified, self._unverified = self._unverified, []
        if unverified:
            self._read_back(unverified)

    def expired(self) -> None:
        """The session is over: every watcher fires."""
        self._unverified.clear()
        fire(self.record.clear())

    def event(self, event: WatcherEvent) -> None:
        if event.type != EventType.NONE:
            fire(self.record.fired(event), event)

    def open(self) -> None:
        self._closed = False

    def close(self) -> None:
        self._closed = True
        self._unverified.clear()
        self._group.clear()
        self.record.clear()
