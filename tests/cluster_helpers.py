"""Helpers for tests that run real hubs: wait for conditions, read ZooKeeper, run the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from hedwig.metadata import open_store


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 20.0, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await check():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


async def owner_of(zk: str, region: str, topic: str) -> str | None:
    store = open_store(zk, region=region)
    await store.start()
    try:
        got = await store.ownership.read_owner_info(topic)
        return got.value.address if got else None
    finally:
        await store.close()


def hedwig(
    *args: str, input: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hedwig", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
