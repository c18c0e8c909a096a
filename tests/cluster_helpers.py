"""Helpers for tests that run real hubs: wait for conditions (``tests.waiting``), read the
store, run the CLI."""

from __future__ import annotations

import subprocess
import sys

from hedwig.metadata import open_store
from tests.waiting import eventually

__all__ = ["eventually", "hedwig", "owner_of"]


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
