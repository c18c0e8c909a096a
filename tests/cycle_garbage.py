"""What the cycle collector finds: frames of Hedwig's code left in reference cycles.

A frame kept by a future's exception (through its traceback) is kept for the collector,
with everything the frame held; on a hub that answers thousands of such requests a second
the collector's pauses grow with them. A test runs its requests inside
:func:`frames_left_for_the_collector` and asserts the list it yields is empty afterwards."""

from __future__ import annotations

import contextlib
import gc
import types
from collections.abc import Iterator


@contextlib.contextmanager
def frames_left_for_the_collector(under: str = "/hedwig/") -> Iterator[list[types.FrameType]]:
    """Yield a list filled, as the block ends, with the frames of code whose file path holds
    ``under`` that only the cycle collector would have freed."""
    frames: list[types.FrameType] = []
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield frames
        gc.collect()
        frames.extend(
            o
            for o in gc.garbage
            if isinstance(o, types.FrameType) and under in o.f_code.co_filename
        )
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
