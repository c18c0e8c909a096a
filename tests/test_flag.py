"""``Flag``: ``asyncio.Event``'s semantics in the space a per-topic object can afford."""

from __future__ import annotations

import asyncio
import sys

from hedwig.flag import Flag


async def test_a_flag_wakes_every_waiter_and_a_cancelled_one_leaves_the_others_waiting() -> None:
    flag = Flag()
    waiters = [asyncio.ensure_future(flag.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(w.done() for w in waiters)
    waiters[0].cancel()
    await asyncio.sleep(0)
    assert waiters[0].cancelled() and not waiters[1].done()
    flag.set()
    await asyncio.gather(*waiters[1:])
    assert flag.is_set()
    await asyncio.wait_for(flag.wait(), 1)  # set: returns at once
    flag.clear()
    late = asyncio.ensure_future(flag.wait())
    await asyncio.sleep(0.01)
    assert not late.done()
    flag.set()
    await asyncio.wait_for(late, 1)
    assert flag._waiters is None  # nobody waits: no list kept


def test_a_flag_nobody_waits_on_is_small() -> None:
    event = asyncio.Event()
    assert sys.getsizeof(Flag()) < 100
    assert sys.getsizeof(event) + sys.getsizeof(event._waiters) > 600  # its deque, made at once
