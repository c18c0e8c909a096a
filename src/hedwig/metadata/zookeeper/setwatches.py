"""Many data watches set in one ZooKeeper request: ``SetWatches``.

A hub watches the owner record of every topic it owns (``ZkOwnership.watch_owner``), so a
survivor of a failover sets thousands of watches a second. One ``exists`` each was nine in ten
of ZooKeeper's requests in a failover: each queued and answered on the server, read back on
kazoo's thread and handed across to the event loop. ZooKeeper's own clients set every watch
they had again in one ``SetWatches`` as they reconnect; the same request sets the watches made
in one turn of the loop (``ZkBridge._set_watch``).

The server sets a data watch on each path given, except that it fires it at once, instead,
for a path that is gone (deleted) or whose last change is later than the request's zxid
(changed). kazoo (2.11) has no record for the request; ``SetWatches`` is one in kazoo's form
(``type``, ``serialize``, ``deserialize``), so kazoo's connection sends it and reads its
(empty) answer as it does its own. Its watchers go into kazoo's record as it is written, on
kazoo's connection thread: before the server can fire them, and on the same thread that
forgets (and fires) every recorded watcher when a connection is lost, so none is left out.

The zxid given is the latest kazoo has seen, so it is after every read or write whose version
a watcher expects; a change between that read and the zxid would not fire. So the watches
that expect a version are read back once set (a ``multiRead``, ``ZkBridge``): a record no
longer at its version (or gone) fires its watcher then. A change before the request is seen
by the read; one after it, by the watch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.protocol.serialization import int_struct, long_struct, write_string

# ZooKeeper's ``OpCode.setWatches``.
SET_WATCHES = 101
# Watches set together at most, and so read back together. ZooKeeper refuses (and drops the
# connection of) a request larger than its ``jute.maxbuffer`` (1 MB by default); its own
# client sends at most 128 KiB of paths a request. An owner record's path is about 80 bytes.
MAX_WATCHES = 512

Watcher = Callable[[Any], None]


class SetWatches:
    """Data watches on ``paths`` (rooted, as kazoo sends paths), one watcher each."""

    __slots__ = ("client", "paths", "watchers")
    type = SET_WATCHES

    def __init__(self, client: Any, paths: Sequence[str], watchers: Sequence[Watcher]) -> None:
        self.client = client
        self.paths = paths
        self.watchers = watchers

    def serialize(self) -> bytearray:
        """The request, its watchers recorded first (on kazoo's connection thread, which is
        the one that writes it)."""
        client = self.client
        record = client._data_watchers
        for path, watcher in zip(self.paths, self.watchers, strict=True):
            record[path].add(watcher)
        out = bytearray(long_struct.pack(client.last_zxid))
        out += int_struct.pack(len(self.paths))
        for path in self.paths:
            out += write_string(path)
        out += int_struct.pack(0)  # exist watches (on paths that may not exist): none
        out += int_struct.pack(0)  # child watches: none
        return out

    @classmethod
    def deserialize(cls, data: bytes, offset: int) -> None:
        """The answer has no body."""
        return None
