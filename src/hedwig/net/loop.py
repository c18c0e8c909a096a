"""The event loop: uvloop where installed (about twice the throughput), else asyncio's own."""

from __future__ import annotations

import asyncio


def install_uvloop() -> bool:
    try:
        import uvloop
    except ImportError:
        return False
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return True
