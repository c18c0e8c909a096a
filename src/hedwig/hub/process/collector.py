"""How a hub process runs Python's cycle collector.

Almost everything a hub allocates is freed by reference counting; the cycle collector finds
only the rare cycle (a released topic's log and its writer, an exception and its traceback).
With CPython's defaults (700, 10, 10) a hub owning a million topics walks young objects
thousands of times a second and its whole heap every few minutes. So what startup allocated is
frozen out of the collector's reach, and it runs rarely.

How rarely, by generation. A generation-0 collection walks the objects made since the last
one: 100,000 (a few milliseconds). A generation-1 collection walks every object made since
the last one of its kind, so its pause grows with ``threshold1``: with 50, the region of a
million topics paused each claiming hub 2.0-3.6 s at a time (up to 5 million young objects,
most of them surviving: topics being claimed), a tenth of a 20 s lease and the p99 of its
publishes. With 5 a pause walks a tenth as many, ten times as often: the same work, in tenths.
A full collection walks the whole heap (at a million topics, tens of seconds: a lost session);
CPython starts one only after ``threshold2`` generation-1 collections and when a quarter of the
heap is new since the last, so ``threshold2`` is 1,000, which keeps it as rare as before (one
chance per 500 million net allocations).
"""

from __future__ import annotations

import gc

THRESHOLDS = (100_000, 5, 1_000)


def settle() -> None:
    """Collect what startup left, freeze the survivors (never walked again) and set the
    thresholds above. Call once the process has started its long-lived parts."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
