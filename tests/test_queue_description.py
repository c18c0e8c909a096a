"""DESCRIBE_QUEUES and ``hedwig subscriptions`` on real hub processes: a shared subscription's
type, consumers, unacknowledged and redelivered counts and the oldest unacknowledged message's
age, beside an exclusive subscription and one its owner does not serve."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import pytest

from hedwig.client import HedwigClient, SubscriptionType
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import NoSuchTopicError
from hedwig.protocol import QueueInfo
from tests.cluster_helpers import hedwig

pytestmark = pytest.mark.integration

TOPIC = "qd/jobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster(hubs=2, region="queue-description", session_timeout_s=3.0) as c:
        yield c


async def test_a_shared_subscription_as_the_owner_serves_it(cluster: DevCluster) -> None:
    async with HedwigClient(cluster.addresses) as client:
        await client.create_subscription(TOPIC, "pool", type=SubscriptionType.SHARED)
        await client.create_subscription(TOPIC, "idle", type=SubscriptionType.KEY_SHARED)
        await client.subscribe(TOPIC, "cursor")
        for i in range(5):
            await client.publish(TOPIC, b"m%d" % i)
        worker = await client.subscribe(TOPIC, "pool", type=SubscriptionType.SHARED)
        got = [await worker.next(10) for _ in range(5)]
        assert [m.seq for m in got] == [1, 2, 3, 4, 5]
        worker.ack(got[0])
        worker.ack(got[1])
        worker.nack(got[2])
        again = await worker.next(10)
        assert (again.seq, again.delivery_count) == (3, 2)
        await asyncio.sleep(0.2)  # the oldest unacknowledged message waits a while: its age
        queues = {q.name: q for q in await client.describe_queues(TOPIC)}
        assert set(queues) == {"cursor", "idle", "pool"}
        pool = queues["pool"]
        assert (pool.type, pool.consumers, pool.unacked, pool.redelivered, pool.dropped) == (
            SubscriptionType.SHARED,
            1,
            3,
            1,
            0,
        )
        assert 200 <= pool.oldest_unacked_ms < 60_000
        assert queues["cursor"] == QueueInfo("cursor", SubscriptionType.EXCLUSIVE, 1, 0, 0, 0, 0)
        assert queues["idle"] == QueueInfo("idle", SubscriptionType.KEY_SHARED, 0, 0, 0, 0, 0)
        with pytest.raises(NoSuchTopicError):
            await client.describe_queues("qd/nosuch")

        # The command line shows the same, beside each subscription's position.
        out = hedwig("subscriptions", TOPIC, "--hub", ",".join(cluster.addresses), "--json")
        assert out.returncode == 0, out.stderr
        rows = {r["subscription"]: r for r in json.loads(out.stdout)}
        row = rows["pool"]
        assert {k: row[k] for k in ("type", "consumers", "unacked", "redelivered", "dropped")} == {
            "type": "shared",
            "consumers": 1,
            "unacked": 3,
            "redelivered": 1,
            "dropped": 0,
        }
        assert row["position"] == 2 and row["backlog"] == 3
        assert 0.2 <= row["oldest_unacked_s"] < 60
        assert (rows["cursor"]["type"], rows["cursor"]["consumers"]) == ("exclusive", 1)
        assert (rows["idle"]["type"], rows["idle"]["consumers"]) == ("key-shared", 0)
        table = hedwig("subscriptions", TOPIC, "--hub", ",".join(cluster.addresses)).stdout
        assert table.splitlines()[0].split()[:6] == [
            "SUBSCRIPTION",
            "TYPE",
            "POSITION",
            "BACKLOG",
            "ATTACHED",
            "CONSUMERS",
        ]
