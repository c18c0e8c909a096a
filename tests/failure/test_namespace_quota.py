"""The topic count quota of a namespace through a hub killed with -9, or frozen past its
session, while two clients create topics on three secured hub processes: the count stops at
the limit, and every topic that exists (and every one whose creation was acknowledged) is
counted, so the limit holds through the fault; a claim cut short leaves its topic counted,
never uncounted."""

from __future__ import annotations

import asyncio

import pytest

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import HedwigError, QuotaExceededError
from hedwig.metadata import NEW_VERSION
from hedwig.metadata.records.namespaces import NamespacePolicy
from tests.failure.clusters import SESSION, admin, open_region

pytestmark = pytest.mark.integration

NS, LIMIT, PER_CLIENT = "acme/k", 12, 15


@pytest.mark.parametrize("fault", ["kill", "freeze"])
async def test_the_topic_count_holds_through_a_hub_lost_mid_creation(
    secure_cluster: DevCluster, fault: str
) -> None:
    cluster = secure_cluster
    async with open_region(cluster) as store:
        await store.namespaces.write_namespace(NS, NamespacePolicy(max_topics=LIMIT), NEW_VERSION)
        await asyncio.sleep(1.5)  # the hubs read policies on a watch: well within this
        retry = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.5, deadline_s=SESSION * 10)
        acked: list[str] = []
        refused: list[QuotaExceededError] = []
        failed: list[HedwigError] = []
        started = asyncio.Event()

        async def creator(i: int, hubs: list[str]) -> None:
            async with HedwigClient(
                hubs, security=admin(cluster), retry=retry, request_timeout_s=SESSION
            ) as client:
                for n in range(PER_CLIENT):
                    topic = f"{NS}/c{i}-{n}"
                    try:
                        await client.publish(topic, b"m")
                        acked.append(topic)
                    except QuotaExceededError as exc:
                        refused.append(exc)
                    except HedwigError as exc:
                        failed.append(exc)
                    if n == 2:
                        started.set()

        addresses = cluster.addresses
        work = [
            asyncio.create_task(creator(0, addresses[:1] + addresses[2:])),
            asyncio.create_task(creator(1, addresses[2:] + addresses[:1])),
        ]
        await started.wait()
        victim = cluster.hub_procs[1]
        if fault == "kill":
            victim.kill()  # -9, mid-creations: claims of it are cut short
        else:
            victim.freeze()  # past its session: others take its topics, it drops them
            await asyncio.sleep(SESSION * 3)
            victim.thaw()
        await asyncio.gather(*work)

        assert len(acked) + len(refused) + len(failed) == 2 * PER_CLIENT
        count = await store.namespaces.topic_count(NS)
        existing = [t for t in await store.topics.list_topics() if t.startswith(f"{NS}/")]
        assert count == LIMIT, (count, acked, refused, failed)
        assert len(refused) >= 2 * PER_CLIENT - LIMIT - len(failed)
        assert all((e.namespace, e.quota, e.limit) == (NS, "max_topics", LIMIT) for e in refused)
        assert set(acked) <= set(existing)
        assert len(existing) <= LIMIT
        for topic in existing:
            # Counted: ``count_topic`` at a limit of 0 admits only a topic counted already.
            assert await store.namespaces.count_topic(NS, topic, 0) == LIMIT
