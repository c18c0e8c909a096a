"""Only a hub's replicator writes origin publisher ids (``@<region>/<publisher>``): a client's
publish under one is refused with a clear, non-retried error, and stores nothing."""

from __future__ import annotations

import pytest

from hedwig.errors import InvalidRequestError, UsageError
from hedwig.protocol import EncodedMessages, Publish
from tests.memory_region import memory_region


async def test_a_client_cannot_publish_under_an_origin_id() -> None:
    async for r in memory_region(1, replication="1/1/1"):
        with pytest.raises(UsageError, match="replicated from another region"):
            r.client(publisher_id="@b/p")
        async with r.client() as c:
            await c.publish("t", b"mine")
            owner = c.owner_of("t")
            assert owner is not None
            conn = await c.connection(owner)
            forged = Publish(
                request_id=conn.next_id(),
                topic="t",
                publisher_id="@b/forged",
                publisher_seq=1,
                messages=EncodedMessages.of_values([b"forged"]),
            )
            with pytest.raises(InvalidRequestError, match="replicated from another") as refused:
                await conn.request(forged)
            assert not refused.value.retriable
            info = await c.topic_info("t")
            assert info.last_seq == 1  # nothing stored
