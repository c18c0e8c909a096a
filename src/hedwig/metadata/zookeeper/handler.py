"""kazoo's threading handler, with a ``select`` that costs no selector per call.

kazoo's connection thread calls its handler's ``select`` before every read and every write
of a request, and the stock handler builds an epoll selector for each call (create, register,
close: three system calls and a few Python objects) so as not to be bound by ``select()``'s
1,024-descriptor limit. Profiling a hub claiming topics on ZooKeeper showed that churn as a
fifth of the process's samples, on a thread that holds the GIL the event loop needs.
``poll()`` has no descriptor limit either and needs no descriptor of its own, so this handler
answers the same question with one ``poll`` call.
"""

from __future__ import annotations

import select
from collections.abc import Sequence
from typing import Any

from kazoo.handlers.threading import SequentialThreadingHandler

_READ = select.POLLIN | select.POLLPRI
_WRITE = select.POLLOUT


def _fd(obj: Any) -> int:
    fd = obj if isinstance(obj, int) else int(obj.fileno())
    if fd < 0:
        raise ValueError(f"invalid file descriptor: {fd}")
    return fd


class PollingHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """``SequentialThreadingHandler`` whose ``select`` is one ``poll()``."""

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
