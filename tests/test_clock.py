"""``SystemClock.wait_for``: the timer on an awaited answer keeps ``asyncio.wait_for``'s
contract (result, ``TimeoutError`` with the future cancelled, the caller's cancellation
passed on), for futures and for any other awaitable."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.clock import SystemClock


async def test_a_future_that_is_answered_in_time() -> None:
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[int] = loop.create_future()
    loop.call_later(0.01, fut.set_result, 7)
    assert await SystemClock().wait_for(fut, 5) == 7
    done: asyncio.Future[int] = loop.create_future()
    done.set_result(8)
    assert await SystemClock().wait_for(done, 0) == 8


async def test_a_future_not_answered_in_time_is_cancelled() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await SystemClock().wait_for(fut, 0.01)
    assert fut.cancelled()


async def test_cancelling_the_caller_cancels_the_future_not_as_a_timeout() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    waiter = asyncio.ensure_future(SystemClock().wait_for(fut, 5))
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert fut.cancelled()


async def test_a_failed_future_and_other_awaitables() -> None:
    fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    fut.set_exception(ValueError("no"))
    with pytest.raises(ValueError, match="no"):
        await SystemClock().wait_for(fut, 1)

    async def slow() -> int:
        await asyncio.sleep(5)  # never awaited to its end: the timeout is the test
        return 1

    with pytest.raises(TimeoutError):
        await SystemClock().wait_for(slow(), 0.01)
    assert await SystemClock().wait_for(asyncio.sleep(0, 3), None) == 3
