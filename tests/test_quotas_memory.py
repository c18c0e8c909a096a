"""Publish rate quotas on a real hub wired in memory (``tests/memory_region.py``): a namespace
limited to N messages a second and published to flat out gets N a second acknowledged (within
10 %), every acknowledged message reads back, another namespace on the same hub is not held,
and a raised quota applies without restarting the hub."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from hedwig.client import HedwigClient, PublishResult
from hedwig.hub import Hub
from hedwig.metadata import NEW_VERSION
from hedwig.metadata.records.namespaces import NamespacePolicy
from tests.memory_region import Region, memory_region, stored
from tests.waiting import until

SLOW, FAST = "acme/slow/t", "acme/fast/t"


@pytest.fixture
async def region() -> AsyncIterator[Region]:
    async for r in memory_region(1, replication="1/1/1"):
        yield r


async def limit(hub: Hub, rate: int) -> None:
    """acme/slow limited to ``rate`` messages a second, once the hub has seen it."""
    ns = hub.store.namespaces
    got = await ns.read_namespace("acme/slow")
    policy = NamespacePolicy(max_publish_msgs_per_s=rate)
    await ns.write_namespace("acme/slow", policy, NEW_VERSION if got is None else got.version)
    await until(lambda: hub.topics.namespaces.policies.get("acme/slow") == policy, what="policy")


async def flat_out(
    client: HedwigClient,
    topic: str,
    seconds: float,
    sent: list[bytes],
    *,
    warm_s: float = 0.0,
    started: asyncio.Event | None = None,
) -> tuple[int, list[asyncio.Future[PublishResult]]]:
    """Publish to ``topic`` as fast as the hub acknowledges (400 in flight) for ``warm_s`` (and
    until ``started`` is set, if given) and then ``seconds``: the messages acknowledged in
    those ``seconds``, and every publish made (``sent``: their values)."""
    futures: list[asyncio.Future[PublishResult]] = []
    acked = 0
    begin = time.monotonic() + warm_s
    end = begin + seconds

    def told(f: asyncio.Future[PublishResult]) -> None:
        nonlocal acked
        if not f.cancelled() and f.exception() is None and begin < time.monotonic() <= end:
            acked += 1

    while time.monotonic() < end:
        if started is not None and not started.is_set():
            begin = max(begin, time.monotonic())
            end = begin + seconds
        while sum(1 for f in futures[-400:] if not f.done()) < 400:
            value = f"{topic}-{len(sent)}".encode()
            sent.append(value)
            f = client.publish_nowait(topic, value)
            f.add_done_callback(told)
            futures.append(f)
        await asyncio.sleep(0.005)
    return acked, futures


async def test_a_namespace_is_held_to_its_publish_rate_and_loses_nothing(region: Region) -> None:
    hub = region.hubs[0]
    await limit(hub, 200)
    async with region.client(max_batch_messages=10) as client:
        await client.publish(SLOW, b"first")  # the topic made (its claim is not timed)
        await client.publish(FAST, b"first")
        sent: list[bytes] = [b"first"]
        slow = asyncio.create_task(flat_out(client, SLOW, 5.0, sent))
        await asyncio.sleep(1.0)
        # Meanwhile another namespace on the same hub publishes unheld.
        other = [client.publish_nowait(FAST, b"x%d" % i) for i in range(2000)]
        await asyncio.gather(*other)
        assert not slow.done()  # (all 2,000 acknowledged while the slow namespace is held)
        acked, futures = await slow
        assert 900 <= acked <= 1100, acked
        await asyncio.gather(*futures)
        # Nothing acknowledged is lost: every message published reads back, in order.
        assert [m.value for m in await stored(client, SLOW)] == sent
        assert len(await stored(client, FAST)) == 2001
        registry = hub.metrics.registry
        held = registry.get_sample_value(
            "hedwig_namespace_throttled_seconds_total", {"namespace": "acme/slow"}
        )
        assert held is not None and held > 0
        assert (
            registry.get_sample_value(
                "hedwig_namespace_throttled_seconds_total", {"namespace": "acme/fast"}
            )
            is None
        )

        # Raised without a restart: the hub's watch brings the new limit to the next publish.
        await limit(hub, 600)
        await asyncio.sleep(1.0)  # the last window's publishes at the old rate expire
        acked, futures = await flat_out(client, SLOW, 3.0, sent)
        assert 1620 <= acked <= 1980, acked
        await asyncio.gather(*futures)
        assert [m.value for m in await stored(client, SLOW)] == sent
