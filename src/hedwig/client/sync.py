"""A thin synchronous facade: the async client on an event loop in a background thread.

For scripts and frameworks without asyncio (Spark executors among them). Every call blocks
until the async call it wraps has finished; exceptions are the same typed ones.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from hedwig.client.facade import HedwigClient
from hedwig.client.publishing import PublishResult
from hedwig.client.subscribing import Subscriber
from hedwig.errors import DeadlineExceededError
from hedwig.protocol import DeliveredMessage, Messages, SubscribeMode, TopicInfo

T = TypeVar("T")


class SyncClient:
    def __init__(self, hubs: str | Sequence[str], **options: Any) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="hedwig-client", daemon=True
        )
        self._thread.start()
        self._client: HedwigClient = self._run(self._make(hubs, options))

    @staticmethod
    async def _make(hubs: str | Sequence[str], options: dict[str, Any]) -> HedwigClient:
        return HedwigClient(hubs, **options)

    def _run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    def submit(self, fn: Callable[[HedwigClient], Awaitable[T]]) -> concurrent.futures.Future[T]:
        """Start ``fn(client)`` on the client's loop and return at once.

        For callers that keep several requests in flight from plain threads (a Spark reader
        keeps the next READ going while it decodes the previous answer).
        """

        async def run() -> T:
            return await fn(self._client)

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, fn: Callable[[HedwigClient], Awaitable[T]], timeout: float | None = None) -> T:
        """``fn(client)`` on the client's loop; blocks until it is done."""
        return self.submit(fn).result(timeout)

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        self._run(self._client.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def publish(self, topic: str, value: bytes, **kw: Any) -> PublishResult:
        return self._run(self._client.publish(topic, value, **kw))

    def publish_many(self, topic: str, values: Iterable[bytes]) -> list[PublishResult]:
        """Publish many values at once (``HedwigClient.publish_batch``); returns when all are
        durable."""
        return list(self._run(self._client.publish_batch(topic, list(values))))

    def read(self, topic: str, start_seq: int, **kw: Any) -> Messages:
        return self._run(self._client.read(topic, start_seq, **kw))

    def topic_info(self, topic: str) -> TopicInfo:
        return self._run(self._client.topic_info(topic))

    def subscribe(
        self,
        topic: str,
        subscriber: str,
        *,
        mode: SubscribeMode = SubscribeMode.CREATE_OR_ATTACH,
        **kw: Any,
    ) -> SyncSubscriber:
        sub = self._run(self._client.subscribe(topic, subscriber, mode=mode, **kw))
        return SyncSubscriber(self, sub)

    def unsubscribe(self, topic: str, subscriber: str) -> None:
        self._run(self._client.unsubscribe(topic, subscriber))


class SyncSubscriber:
    def __init__(self, owner: SyncClient, sub: Subscriber) -> None:
        self._owner = owner
        self._sub = sub

    def next(self, timeout: float | None = None) -> DeliveredMessage:
        return self._owner._run(self._sub.next(timeout))

    def __iter__(self) -> Iterator[DeliveredMessage]:
        while True:
            try:
                yield self.next(None)
            except DeadlineExceededError:
                return

    def consume(self, seq: int) -> None:
        self._owner._loop.call_soon_threadsafe(self._sub.consume, seq)

    def close(self) -> None:
        self._owner._run(self._sub.close())
