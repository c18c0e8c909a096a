"""kazoo's threading handler, with a ``select`` that costs no selector per call.

kazoo's connection thread calls its handler's ``select`` before every read and every write
of a request, and the stock handler builds an epoll selector for each call (create, register,
close: three system calls and a few Python objects) so as not to be bound by ``select()``'s
1,024-descriptor limit. Profiling a hub claiming topics on ZooKeeper showed that churn as a
fifth of the process's samples, on a thread that holds the GIL the event loop needs.
``poll()`` has no descriptor limit either and needs no descriptor of its own, so this handler
answers the same question with one ``poll`` call.

It also runs the completions of requests where they complete, on the connection thread,
instead of handing each to kazoo's completion thread: a ``create`` completes twice (kazoo
wraps an inner request's result), so each crossed that queue twice before ours crossed to
the event loop, every crossing a thread to wake and the GIL to hand over. Completions here
only translate a result and schedule it on the loop; watches still run on their own thread.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import AsyncResult, SequentialThreadingHandler

log = logging.getLogger(__name__)

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT


def _fd(obj: Any) -> int:
    fd = obj if isinstance(obj, int) else int(obj.fileno())
    if fd < 0:
        raise ValueError(f"invalid file descriptor: {fd}")
    return fd


class _InlineResult(AsyncResult):  # type: ignore[misc]
    """A result whose callbacks run on the thread that sets it, at once (kazoo's queue them
    for its completion thread). A callback must not block: none here does (kazoo's own chain
    further requests, ours schedule on the event loop)."""

    def _do_callbacks(self) -> None:
        for callback in self._callbacks:
            try:
                callback(self)
            except Exception:  # as kazoo's completion thread does: log, go on
                log.exception("ZooKeeper completion callback failed")


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """``SequentialThreadingHandler`` whose ``select`` is one ``poll()`` and whose request
    completions run inline."""

    def async_result(self) -> AsyncResult:
        return _InlineResult(self)

    def select(
        self,
        rlist: Sequence[Any],
        wlist: Sequence[Any],
        xlist: Sequence[Any],
        timeout: float | None = None,
    ) -> tuple[list[Any], list[Any], list[Any]]:
        """What ``kazoo.handlers.utils.selector_select`` answers: the objects of ``rlist``
        ready to read, else of ``wlist`` ready to write (an error or hang-up counts as
        either, as with ``selectors``); ``xlist`` is never reported."""
        if timeout is not None and timeout < 0:
            raise ValueError("timeout must be non-negative")
        masks: dict[int, int] = {}
        readers: dict[int, list[Any]] = {}
        writers: dict[int, list[Any]] = {}
        for obj in rlist:
            fd = _fd(obj)
            masks[fd] = masks.get(fd, 0) | _READ
            readers.setdefault(fd, []).append(obj)
        for obj in wlist:
            fd = _fd(obj)
            masks[fd] = masks.get(fd, 0) | _WRITE
            writers.setdefault(fd, []).append(obj)
        poller = select.poll()
        for fd, mask in masks.items():
            poller.register(fd, mask)
        ready = poller.poll(None if timeout is None else timeout * 1000)
        rout: list[Any] = []
        wout: list[Any] = []
        for fd, events in ready:
            if fd in readers and events & ~_WRITE:
                rout.extend(readers[fd])
            elif fd in writers and events & ~_READ:
                wout.extend(writers[fd])
        return rout, wout, []
