"""Noticing when the hub's event loop stands still, and saying where.

Everything a hub does runs on one event loop: serving clients, answering peers' storage
requests, refreshing its metadata session. A loop that stands still past the session timeout
(ZooKeeper's session, etcd's lease) loses every topic the hub owns, and peers drop a hub that
has not answered for 10 s. A region of a million topics showed it: one hub stood still for
over 20 s and lost 334,426 topics at once, and nothing in its log said where it had been.

So a thread of its own watches a timestamp the loop renews every ``TICK_S``. When the loop is
late by more than ``threshold_s``, the thread logs, once per stall, the loop thread's stack at
that moment (where it is stuck: the thread reads it with ``sys._current_frames``, which needs
no help from the stuck loop), and whether the cycle collector is running; when the loop runs
again, how long the stall lasted, counted in the hub's metrics. Pauses of the cycle collector
longer than ``threshold_s`` are logged too, with their generation (``gc.callbacks``): with
millions of objects a full collection is a stall of its own.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# How often the loop renews its timestamp, and how often the watching thread looks (seconds).
TICK_S = 0.25
# A loop later than this is stalled (well under the peers' 10 s and any session timeout).
STALL_S = 2.0


class StallWatch:
    """Watches the running loop from a daemon thread; ``on_stall(seconds)`` is called on the
    loop when a stall ends, ``on_gc_pause(seconds)`` (on the loop's thread) after a long
    collection, ``on_collection(generation, seconds)`` after every collection."""

    def __init__(
        self,
        *,
        threshold_s: float = STALL_S,
        on_stall: Callable[[float], None] | None = None,
        on_gc_pause: Callable[[float], None] | None = None,
        on_collection: Callable[[int, float], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.threshold_s = threshold_s
        self._on_stall = on_stall
        self._on_gc_pause = on_gc_pause
        self._on_collection = on_collection
        self._clock = clock
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread = 0
        self._last_tick = 0.0
        self._stalled_since: float | None = None
        self._gc_started: float | None = None
        self._gc_generation = -1
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.stalls = 0
        self.longest_s = 0.0

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._last_tick = self._clock()
        self._tick()
        gc.callbacks.append(self._gc)
        self._thread = threading.Thread(target=self._watch, name="hedwig-stall-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._timer is not None:
            self._timer.cancel()
        if self._gc in gc.callbacks:
            gc.callbacks.remove(self._gc)
        if self._thread is not None:
            self._thread.join(timeout=2 * TICK_S)

    # on the loop ------------------------------------------------------------------------------

    def _tick(self) -> None:
        now = self._clock()
        if self._stalled_since is not None:
            self._stalled_since = None
            took = now - self._last_tick
            self.stalls += 1
            self.longest_s = max(self.longest_s, took)
            log.warning("the event loop stood still for %.1f s", took)
            if self._on_stall is not None:
                self._on_stall(took)
        self._last_tick = now
        assert self._loop is not None
        self._timer = self._loop.call_later(TICK_S, self._tick)

    def _gc(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._loop_thread:
            return
        if phase == "start":
            self._gc_started, self._gc_generation = self._clock(), int(info["generation"])
            return
        started, self._gc_started = self._gc_started, None
        if started is None:
            return
        took = self._clock() - started
        if self._on_collection is not None:
            self._on_collection(self._gc_generation, took)
        if took >= self.threshold_s:
            log.warning(
                "the cycle collector (generation %d) paused the hub for %.1f s, "
                "collecting %d objects",
                self._gc_generation,
                took,
                int(info.get("collected", 0)),
            )
            if self._on_gc_pause is not None:
                self._on_gc_pause(took)

    # on the watching thread -------------------------------------------------------------------

    def _watch(self) -> None:
        while not self._stop.wait(TICK_S):
            late = self._clock() - self._last_tick
            if late < self.threshold_s or self._stalled_since is not None:
                continue
            self._stalled_since = self._clock()
            frame = sys._current_frames().get(self._loop_thread)
            where = "".join(traceback.format_stack(frame)) if frame is not None else "?\n"
            # Not kept until the next stall: a frame that returns keeps its locals (and the
            # frames under it theirs) for as long as it is referred to.
            del frame
            collecting = (
                f" in the cycle collector (generation {self._gc_generation})"
                if self._gc_started is not None
                else ""
            )
            log.warning(
                "the event loop has stood still for %.1f s%s, at:\n%s",
                late,
                collecting,
                where.rstrip(),
            )
