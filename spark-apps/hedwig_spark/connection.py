"""A Hedwig client for Spark's blocking callers, and what the driver asks the cluster.

Spark calls the source from plain threads (the planner, the streaming driver runner, executor
tasks), never from an event loop. ``HubSession`` runs an asyncio ``HedwigClient`` on a loop in
a daemon thread and hands out ``concurrent.futures.Future`` objects, so a reader can keep the
next READ in flight while it decodes the previous answer.

Sessions are never pickled: Spark pickles readers and writers to ship them, so they open a
session where they run and close it when done (``stop()`` is not reliably called on Spark
4.1, so a long-lived driver session is a daemon thread that dies with the process).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import re
import threading
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.metadata import MetadataStore, open_store
from hedwig_spark.offsets import TopicBounds
from hedwig_spark.options import DEFAULT_RETRY_DEADLINE_S, ClusterOptions

T = TypeVar("T")


class HubSession:
    """One ``HedwigClient`` on its own event loop thread."""

    def __init__(
        self,
        hubs: Sequence[str],
        *,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        **client_options: Any,
    ) -> None:
        if not hubs:
            raise ValueError("no hub address to connect to")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="hedwig-spark", daemon=True
        )
        self._thread.start()
        retry = RetryPolicy(deadline_s=retry_deadline_s)

        async def make() -> HedwigClient:
            return HedwigClient(list(hubs), retry=retry, **client_options)

        self.client: HedwigClient = self._submit_coro(make()).result()

    def _submit_coro(self, coro: Awaitable[T]) -> concurrent.futures.Future[T]:
        async def run() -> T:
            return await coro

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def submit(self, fn: Callable[[HedwigClient], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Start ``fn(client)`` on the session's loop; the future resolves with its result."""
        return self._submit_coro(fn(self.client))

    def call(self, fn: Callable[[HedwigClient], Awaitable[T]]) -> T:
        return self.submit(fn).result()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._submit_coro(self.client.close()).result(30)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(5)
            if not self._thread.is_alive():
                self._loop.close()

    def __enter__(self) -> HubSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_zk(cluster: ClusterOptions, fn: Callable[[MetadataStore], Awaitable[T]]) -> T:
    zookeeper = cluster.zookeeper
    assert zookeeper is not None

    async def go() -> T:
        store = open_store(zookeeper, region=cluster.region)
        await store.start()
        try:
            return await fn(store)
        finally:
            await store.close()

    return asyncio.run(go())


def resolve_hubs(cluster: ClusterOptions) -> tuple[str, ...]:
    """The hub addresses to use: the ``hubs`` option, else the alive hubs in ZooKeeper."""
    if cluster.hubs:
        return cluster.hubs

    async def alive(store: MetadataStore) -> list[str]:
        return [h.address for h in await store.hubs.list_hubs() if h.alive]

    hubs = _run_zk(cluster, alive)
    if not hubs:
        raise RuntimeError(
            f"no alive hub in region {cluster.region!r} of ZooKeeper {cluster.zookeeper}"
        )
    return tuple(hubs)


def list_topics(cluster: ClusterOptions, pattern: re.Pattern[str]) -> list[str]:
    """Topics in ZooKeeper whose whole name matches ``pattern`` (as Kafka's subscribePattern)."""

    async def topics(store: MetadataStore) -> list[str]:
        return await store.topics.list_topics()

    return sorted(t for t in _run_zk(cluster, topics) if pattern.fullmatch(t))


def topic_bounds(session: HubSession, topics: Sequence[str]) -> dict[str, TopicBounds]:
    """First available and last sequence id of each topic, asked of the owners concurrently."""

    async def ask(client: HedwigClient) -> dict[str, TopicBounds]:
        infos = await asyncio.gather(*(client.topic_info(t) for t in topics))
        return {
            t: TopicBounds(i.first_available, i.last_seq)
            for t, i in zip(topics, infos, strict=True)
        }

    return session.call(ask)
