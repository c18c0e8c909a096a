"""Watches of many keys under one prefix, served by one etcd watch of the prefix.

A hub watches the owner record of every topic it owns. One etcd watch each cost a message on
the watch stream per claim (a fifth of a claiming hub's event loop) and a watcher in etcd per
topic, which etcd catches up 512 at a time when they start behind. One watch of the whole
prefix delivers every hub's changes to every hub instead (batched in its responses; a change of
a key nobody here watches costs a dictionary lookup). Plans are watched the same way.

``add(key, after, callback)``: ``callback`` runs once, at the first change of ``key`` after
revision ``after``. The prefix watch delivers changes in revision order; once it has delivered
one past ``after``, a change of ``key`` in between went by before the watch was added. It keeps
the keys it delivered lately, each with its last revision (``RECENT_KEYS`` of them: the
window), so such a watch fires at once if its key changed after ``after``, and is served by
the prefix watch from now on if it did not. Only a watch from before the window is set on its
own (``fallback``: a watch of its key alone). In a failover each survivor's prefix watch
delivers every take-over of the region, so its own claims' writes were nearly always passed by
the time their answers came: each was a watch of its own, which etcd then had to catch up from
its history.

The prefix watch rides the client's watch stream (``watch_stream``) and resumes after a break:
every callback runs at the break (its holder reads again, as whatever happened meanwhile is
not known here) and the window empties, but the etcd watch is made again from the revision
after the last change it delivered, so the watches added meanwhile, from a revision no older
than that, are served by it. If etcd compacted that revision meanwhile, or cancels the watch,
every callback runs and the next ``add`` starts a new prefix watch from its own revision.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable, Sequence
from typing import Any

from hedwig.metadata.etcd.kv import prefix_end
from hedwig.metadata.etcd.watch_stream import Watch, WatchStream

_Watches = Callable[[], None] | list[tuple[int, Callable[[], None]]]
_NO_REVISION = 1 << 62  # past any revision etcd will reach
# Changes a prefix watch remembers it delivered lately, about 200 bytes each. A failover's
# take-overs deliver a few thousand changes a second to every survivor; a take-over watches
# its record well within a second of writing it.
RECENT_KEYS = 8_192


class PrefixWatch:
    """Watches of keys under ``prefix`` on one etcd watch (see the module's docstring); a
    handler of ``watch_stream.WatchStream``."""

    def __init__(
        self,
        stream: WatchStream,
        prefix: bytes,
        fallback: Callable[[bytes, int, Callable[[], None]], None],
    ) -> None:
        self._stream = stream
        self._prefix = prefix
        self._fallback = fallback
        # By key: the callback of its one watch, or a list of (after, callback) when there
        # are several (a key is nearly always watched once: a list each was 64 bytes per
        # owned topic).
        self._callbacks: dict[bytes, _Watches] = {}
        # The revision a key's one watch is from, while the prefix watch has not delivered
        # past it (a change at or before it is not the one waited for); dropped once it has,
        # every later change being past it (a tuple and an int kept for good were about 90
        # bytes per owned topic). ``_after_floor``: the least of them.
        self._after: dict[bytes, int] = {}
        self._after_floor = _NO_REVISION
        self._delivered = -1  # no etcd watch: the next add makes one
        # The keys delivered lately (their ends), each with its last revision, and the
        # changes in the order delivered (which says what leaves first): every change after
        # ``_recent_floor`` up to ``_delivered`` is here (none is known while the stream is
        # broken: ``_NO_REVISION``).
        self._recent: dict[bytes, int] = {}
        self._recent_order: collections.deque[tuple[bytes, int]] = collections.deque()
        self._recent_floor = _NO_REVISION
        self._watch: Watch | None = None
        # For tests and benchmarks: watches set on their own.
        self.fallbacks = 0

    def follows(self, after: int) -> bool:
        """Whether a watch from revision ``after`` can be served by the prefix watch without
        being set on its own: it has not delivered past it, or what it delivered since is
        still in its window (whose floor is never past what it delivered)."""
        return self._watch is not None and after >= self._recent_floor

    def add(self, key: bytes, after: int, callback: Callable[[], None]) -> None:
        # By the key's end past the prefix, which every key here shares (about 25 bytes
        # less per owned topic).
        whole, key = key, key[len(self._prefix) :]
        if self._watch is None:
            self._delivered = self._recent_floor = after
            self._recent, self._recent_order = {}, collections.deque()
            self._watch = self._stream.watch(
                self._prefix, prefix_end(self._prefix), after + 1, self, resume=True
            )
        elif after < self._delivered:
            if after < self._recent_floor:
                self.fallbacks += 1
                self._fallback(whole, after, callback)
                return
            changed = self._recent.get(key, -1)
            if changed > after:  # went by before the watch: it fires now
                asyncio.get_running_loop().call_soon(callback)
                return
            after = self._delivered  # none since: every later change is still to come
        held = self._callbacks.get(key)
        if held is None:
            self._callbacks[key] = callback
            self._after[key] = after
            self._after_floor = min(self._after_floor, after)
        elif isinstance(held, list):
            held.append((after, callback))
        else:
            self._callbacks[key] = [(self._after.pop(key, -1), held), (after, callback)]

    # the stream's handler (``watch_stream.WatchHandler``) -------------------------------

    def changed(self, events: Sequence[Any]) -> bool:
        start_of_name = len(self._prefix)
        recent, order = self._recent, self._recent_order
        for ev in events:
            revision = int(ev.kv.mod_revision)
            if revision > self._delivered:
                self._delivered = revision
            key = bytes(ev.kv.key)[start_of_name:]
            recent[key] = revision
            order.append((key, revision))
            self._dispatch(key, revision)
        while len(order) > RECENT_KEYS:
            key, revision = order.popleft()
            self._recent_floor = revision
            if recent.get(key) == revision:  # not changed again since
                del recent[key]
        if self._delivered > self._after_floor:
            self._passed()
        return False

    def created(self) -> None:
        if self._recent_floor == _NO_REVISION:
            # Made again after a break, from the revision after the last delivered: every
            # later change is still to come (the window starts empty there).
            self._recent_floor = self._delivered

    def interrupted(self) -> None:
        self._fire_all()

    def ended(self) -> None:
        self._watch = None
        self._delivered = -1
        self._fire_all()

    def _fire_all(self) -> None:
        """What happened meanwhile is unknown: everyone reads again."""
        self._recent, self._recent_order = {}, collections.deque()
        self._recent_floor = _NO_REVISION
        fired, self._callbacks = self._callbacks, {}
        self._after, self._after_floor = {}, _NO_REVISION
        for held in fired.values():
            if isinstance(held, list):
                for _, callback in held:
                    callback()
            else:
                held()

    def _passed(self) -> None:
        """Forget the revisions of the watches the prefix watch has delivered past."""
        delivered = self._delivered
        self._after = {k: a for k, a in self._after.items() if a >= delivered}
        self._after_floor = min(self._after.values(), default=_NO_REVISION)

    def _dispatch(self, key: bytes, revision: int) -> None:
        held = self._callbacks.get(key)
        if held is None:
            return
        if not isinstance(held, list):
            if revision <= self._after.get(key, -1):
                return
            del self._callbacks[key]
            self._after.pop(key, None)
            held()
            return
        due = [cb for after, cb in held if revision > after]
        if not due:
            return
        rest = [(after, cb) for after, cb in held if revision <= after]
        if rest:
            self._callbacks[key] = rest
        else:
            del self._callbacks[key]
        for callback in due:
            callback()

    async def close(self) -> None:
        """No more changes (nothing fires)."""
        if self._watch is not None:
            self._stream.cancel(self._watch)
            self._watch = None
        self._delivered = -1
