"""Giving back what closed connections held: the C allocator's free memory, after a flood.

A TLS connection costs a hub's C heap about a hundred kilobytes while it is open (uvloop's
256 KiB read buffer as far as reads have filled it, OpenSSL's state and buffers); once it is
closed that memory is free, but glibc's allocator keeps it: its main heap gives pages back
only from its top, and connections that come and go in thousands leave live allocations above
the ones they freed. 2,000 anonymous connections left a hub at 190 MB from 75, for good, with
nothing leaked (a second flood reused the same memory, and every connection object was gone).
``malloc_trim(0)`` returns the free pages inside the heap to the system (``madvise``): about
15 ms for that heap, on the event loop.

So the hub's sweeper (``hedwig.hub.front.doorway.Sweeper``) asks ``MemoryRelease`` every
``CHECK_S``: when at least ``AFTER_CLOSED`` connections are gone since the last trim, it trims,
and once more at the next check, when the flood's last connections have gone too. Gone means
begun (past the TLS listener's first bytes) and no longer open, a TLS handshake that failed
included, and the count runs from the last trim, not from the last check. On a loaded machine
most of a flood's connections were handshakes that failed (the attacker gave up waiting) and
the rest closed over minutes, fewer than ``AFTER_CLOSED`` a check: counted as they closed and
by check, the hub never trimmed and kept its heap at 123 MB from 11 with no connection open. A
hub whose connections stay trims never; one under a flood, once per ``CHECK_S`` (a thousandth
of its time). Off glibc (musl, macOS) there is no ``malloc_trim`` and nothing is done: those
allocators give memory back their own way.

Connections must be freed when they close for any of this to matter: one left in a reference
cycle (an exception's traceback holding it, ``hedwig.protocol.connection.RefusedFrame``) is
freed only by a full collection, which the hub's tuned collector almost never runs
(``hedwig.hub.process.collector``), and pins its pages meanwhile.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from collections.abc import Callable

from hedwig.clock import Clock

log = logging.getLogger(__name__)

# How often the connections gone are looked at, and how many make a flood worth a trim.
CHECK_S = 10.0
AFTER_CLOSED = 100


def _malloc_trim() -> Callable[[], object] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        libc = ctypes.CDLL(name)
    except OSError:
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is None:
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return lambda: trim(0)


class MemoryRelease:
    def __init__(self, clock: Clock, trim: Callable[[], object] | None = None) -> None:
        self._clock = clock
        self._trim = trim if trim is not None else _malloc_trim()
        self._checked_at = clock.monotonic()
        # Connections gone at the last trim (or the start).
        self._trimmed_at = 0
        self._tail = False
        self.trims = 0

    def check(self, gone: int) -> bool:
        """``gone``: connections gone so far (a running count: begun and no longer open,
        those whose TLS handshake failed included). Whether it trimmed now."""
        now = self._clock.monotonic()
        if now - self._checked_at < CHECK_S:
            return False
        self._checked_at = now
        flood = gone - self._trimmed_at >= AFTER_CLOSED
        due, self._tail = flood or self._tail, flood
        if not due or self._trim is None:
            return False
        self._trimmed_at = gone
        start = time.perf_counter()
        self._trim()
        self.trims += 1
        log.debug(
            "returned free memory to the system in %.1f ms", 1000 * (time.perf_counter() - start)
        )
        return True
