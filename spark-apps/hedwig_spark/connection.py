"""A Hedwig client for Spark's blocking callers, and what the driver asks the cluster.

Spark calls the source from plain threads (the planner, the streaming driver runner, executor
tasks), never from an event loop. The client library's synchronous facade (``SyncClient``: an
asyncio ``HedwigClient`` on a loop in a daemon thread) is made for such callers, and its
``submit`` hands out ``concurrent.futures.Future`` objects, so a reader can keep the next READ
in flight while it decodes the previous answer. ``HubSession`` is that facade with the
source's own retry deadline.

Sessions are never pickled: Spark pickles readers and writers to ship them, so they open a
session where they run and close it when done (``stop()`` is not reliably called on Spark
4.1, so a long-lived driver session is a daemon thread that dies with the process).

The driver's questions to the metadata store (which hubs are alive, which topics exist) are
one-off: each opens the store for the question's duration and closes it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from hedwig.client import HedwigClient, RetryPolicy, SyncClient
from hedwig.errors import NoSuchTopicError
from hedwig.metadata import MetadataStore, open_store
from hedwig.protocol import lane_name, lane_of
from hedwig_spark.offsets import TopicBounds
from hedwig_spark.options import DEFAULT_RETRY_DEADLINE_S, ClusterOptions, SecurityOptions

T = TypeVar("T")


class HubSession(SyncClient):
    """A ``SyncClient`` whose requests retry until the source's ``retryDeadline``.

    Everything else is ``SyncClient``'s: ``submit(fn)`` starts ``fn(client)`` on the client's
    loop and returns a future, ``call(fn)`` waits for it, ``close()`` (or the end of a ``with``
    block) closes the client and stops its thread. Other keyword arguments go to
    ``HedwigClient`` (the writer passes ``publisher_id``).
    """

    def __init__(
        self,
        hubs: Sequence[str],
        *,
        retry_deadline_s: float = DEFAULT_RETRY_DEADLINE_S,
        security: SecurityOptions | None = None,
        **client_options: Any,
    ) -> None:
        if not hubs:
            raise ValueError("no hub address to connect to")
        retry = RetryPolicy(deadline_s=retry_deadline_s)
        super().__init__(
            list(hubs),
            retry=retry,
            security=(security or SecurityOptions()).client_security(),
            **client_options,
        )


def _ask_store(cluster: ClusterOptions, fn: Callable[[MetadataStore], Awaitable[T]]) -> T:
    """``fn(store)`` on the cluster's metadata store, opened for this question only."""
    url = cluster.metadata
    if url is None:
        raise ValueError("set the 'metadata' option (the metadata URL) to look the cluster up")

    async def go() -> T:
        async with open_store(url, region=cluster.region) as store:
            return await fn(store)

    return asyncio.run(go())


def resolve_hubs(cluster: ClusterOptions) -> tuple[str, ...]:
    """The hub addresses to use: the ``hubs`` option, else the alive hubs the metadata store
    lists."""
    if cluster.hubs:
        return cluster.hubs

    async def alive(store: MetadataStore) -> list[str]:
        return [h.address for h in await store.hubs.list_hubs() if h.alive]

    hubs = _ask_store(cluster, alive)
    if not hubs:
        raise RuntimeError(
            f"no alive hub in region {cluster.region!r} of metadata store {cluster.metadata}"
        )
    return tuple(hubs)


def list_topics(cluster: ClusterOptions, pattern: re.Pattern[str]) -> list[str]:
    """Topics in ZooKeeper whose whole name matches ``pattern`` (as Kafka's subscribePattern)."""

    async def topics(store: MetadataStore) -> list[str]:
        return await store.topics.list_topics()

    return sorted(t for t in _ask_store(cluster, topics) if pattern.fullmatch(t))


def topic_bounds(session: SyncClient, topics: Sequence[str]) -> dict[str, TopicBounds]:
    """First available and last sequence id of each topic, asked of the owners concurrently."""

    async def bounds(client: HedwigClient, topic: str) -> TopicBounds:
        try:
            info = await client.topic_info(topic)
        except NoSuchTopicError:
            return TopicBounds(1, 0)  # not created yet: empty (reading never creates it)
        return TopicBounds(info.first_available, info.last_seq)

    async def ask(client: HedwigClient) -> dict[str, TopicBounds]:
        got = await asyncio.gather(*(bounds(client, t) for t in topics))
        return dict(zip(topics, got, strict=True))

    return session.call(ask)


def with_lanes(session: SyncClient, topics: Sequence[str]) -> list[str]:
    """``topics`` and the lanes of each (``T~laneN``, ``docs/architecture.md``, "Lanes"),
    sorted: a topic served by lanes is read lane by lane, as Kafka's partitions are, with an
    offset per lane. A topic not created yet has no lanes."""

    async def lanes(client: HedwigClient, topic: str) -> list[str]:
        if lane_of(topic)[1]:
            return [topic]
        try:
            got = await client.describe_lanes(topic)
        except NoSuchTopicError:
            return [topic]
        return [lane_name(topic, x.index) for x in got.lanes]

    async def ask(client: HedwigClient) -> list[str]:
        found = await asyncio.gather(*(lanes(client, t) for t in topics))
        return sorted({name for names in found for name in names} | set(topics))

    return session.call(ask)
