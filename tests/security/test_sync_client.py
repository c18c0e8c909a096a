"""``SyncClient`` on secured hubs: ``send`` and ``flush`` from plain threads, bad messages
refused in the caller's thread at once, a refused topic raised by ``flush``, and
``publish_batch`` with the async client's result.

The hubs run on the test's event loop; the sync client runs its own loop in a thread, so its
blocking calls are made from worker threads (``asyncio.to_thread``) while the hubs serve.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from hedwig.client import SyncClient
from hedwig.client.publishing import BatchPublishResult
from hedwig.errors import InvalidTopicError, MessageTooLargeError, SendFailedError, UsageError
from hedwig.metadata.acls import AclRule, Operation, PatternType
from hedwig.protocol import Message
from tests.security.conftest import FAST_RETRY, SecureRegion
from tests.security.test_authorization import grant, settled

WRITER = AclRule(
    principal="alice",
    operations=frozenset({Operation.PUBLISH, Operation.CREATE, Operation.READ, Operation.DESCRIBE}),
    name="sync.",
    pattern=PatternType.PREFIX,
)


async def writer_client(region: SecureRegion) -> SyncClient:
    await grant(region, "alice", WRITER)
    await settled(region)
    return await asyncio.to_thread(
        SyncClient,
        region.addresses,
        security=region.security(cert="alice"),
        retry=FAST_RETRY,
    )


async def stored(client: SyncClient, topic: str) -> list[bytes]:
    answer = await asyncio.to_thread(client.read, topic, 1, max_messages=100_000)
    return [m.value for b in answer.batches for m in b.delivered()]


async def test_sends_from_several_threads_are_all_stored_in_each_threads_order(
    secure: SecureRegion,
) -> None:
    client = await writer_client(secure)
    try:

        def sender(n: int) -> None:
            for i in range(2_000):
                client.send("sync.many", b"%d:%d" % (n, i))

        def send_all() -> None:
            threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            client.flush()

        await asyncio.to_thread(send_all)
        values = await stored(client, "sync.many")
        assert len(values) == 8_000
        for n in range(4):
            mine = [v for v in values if v.startswith(b"%d:" % n)]
            assert mine == [b"%d:%d" % (n, i) for i in range(2_000)]
    finally:
        await asyncio.to_thread(client.close)


async def test_a_bad_message_is_refused_in_the_callers_thread(secure: SecureRegion) -> None:
    client = await writer_client(secure)
    try:

        def refused() -> None:
            with pytest.raises(UsageError, match="bytes, not str"):
                client.send("sync.bad", "text")  # type: ignore[arg-type]
            with pytest.raises(MessageTooLargeError):
                client.send("sync.bad", b"x" * (client.call(_limit) + 1))
            with pytest.raises(InvalidTopicError, match="non-printable"):
                client.send("sync.bad\n", b"x")
            client.send("sync.bad", b"fine")
            client.flush()

        await asyncio.to_thread(refused)
        assert await stored(client, "sync.bad") == [b"fine"]
    finally:
        await asyncio.to_thread(client.close)


async def _limit(c: object) -> int:
    return c.max_message_size  # type: ignore[attr-defined, no-any-return]


async def test_a_topic_the_principal_may_not_publish_is_raised_by_flush_once(
    secure: SecureRegion,
) -> None:
    client = await writer_client(secure)
    try:

        def denied() -> None:
            client.send("sync.ok", b"kept")
            client.send("elsewhere", b"refused")
            with pytest.raises(SendFailedError) as failed:
                client.flush()
            assert failed.value.count == 1
            assert "alice may not" in str(failed.value.__cause__)
            client.flush()  # raised once
            client.send("sync.ok", b"after")
            client.flush()

        await asyncio.to_thread(denied)
        assert await stored(client, "sync.ok") == [b"kept", b"after"]
    finally:
        await asyncio.to_thread(client.close)


async def test_publish_batch_answers_as_the_async_client_does(secure: SecureRegion) -> None:
    client = await writer_client(secure)
    try:
        results = await asyncio.to_thread(
            client.publish_batch, "sync.batch", [b"a", Message(value=b"b", key=b"k"), b"c"]
        )
        assert isinstance(results, BatchPublishResult)
        assert [r.seq for r in results] == [1, 2, 3]
    finally:
        await asyncio.to_thread(client.close)
