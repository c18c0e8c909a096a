"""A shared subscription under faults: three consumer processes share it while publishers
run, and one consumer, then the topic's owner, is killed with SIGKILL. The history is checked
by ``queue_history.check_queue`` (nothing lost, nothing given out twice but as a counted
redelivery) and the publishers' by ``history.check``.

Every scenario runs on a plain cluster and on a secured one (TLS, client certificates, ACLs):
there the administrator makes the topic and publishes, and the consumers are ``alice``,
granted ``subscribe`` on the topics under ``q/`` and nothing else: she creates the
subscription, which is hers (``hedwig.hub.front.owners``), and joining, acknowledging and
being given messages again after a failure need no more. With a dead-letter topic (the owner
killed while a tenth of the messages are always nacked and dead-lettered) she needs
``publish`` on it too: refused without it, made once granted; the owner publishes the letters
for her, to the dead-letter topic's owner over the hubs' internal listener. With a fifth of the
messages delayed (``deliver_after``), the owner killed while some wait in its index: the next
owner finds them in the log, and none is delivered before its time."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import ForbiddenError
from hedwig.metadata import ANY_VERSION
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType
from hedwig.protocol import SubscriptionType
from tests.cluster_helpers import owner_of
from tests.failure.clusters import SESSION, open_region, security
from tests.failure.history import Workload, check
from tests.failure.queue_history import (
    Consumer,
    QueueHistory,
    check_queue,
    read_dead_letters,
    settle,
)
from tests.waiting import succeeds

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

TOPIC = "q/jobs"
DEAD_LETTER = "q/jobs.dead"
SUB = "workers"
CONSUMER = "alice"  # on a secured cluster


def consumer_env(cluster: DevCluster) -> dict[str, str] | None:
    """What a consumer process connects with: alice's certificate on a secured cluster."""
    return cluster.security.client_env(CONSUMER) if cluster.security is not None else None


async def prepare(cluster: DevCluster, kind: SubscriptionType, dead_letter: bool) -> None:
    """The subscription made (with ``dead_letter``, two deliveries, then the dead-letter
    topic); on a secured cluster by alice, granted ``subscribe`` under ``q/`` and waited for
    until every hub lets her in, on the topics the administrator made."""
    if cluster.security is None:
        async with HedwigClient(cluster.addresses) as anyone:
            if dead_letter:
                await anyone.publish(DEAD_LETTER, b"first")
            await create(anyone, kind, dead_letter)
        return
    async with open_region(cluster) as store:
        await store.topics.ensure_topic(TOPIC)
        await store.topics.ensure_topic(DEAD_LETTER)
    subscribe = AclRule(
        CONSUMER, frozenset({Operation.SUBSCRIBE}), name="q/", pattern=PatternType.PREFIX
    )
    await grant(cluster, subscribe)
    async with HedwigClient(cluster.addresses, security=security(cluster, CONSUMER)) as alice:
        if dead_letter:
            with pytest.raises(ForbiddenError, match="may not publish"):
                await create(alice, kind, dead_letter)
            publish = AclRule(CONSUMER, frozenset({Operation.PUBLISH}), name=DEAD_LETTER)
            await grant(cluster, subscribe, publish)
            await succeeds(
                lambda: create(alice, kind, dead_letter),
                ForbiddenError,
                what="alice's publish grant",
            )
        else:
            await create(alice, kind, dead_letter)


async def create(client: HedwigClient, kind: SubscriptionType, dead_letter: bool) -> None:
    await client.create_subscription(
        TOPIC,
        SUB,
        type=kind,
        max_deliveries=2 if dead_letter else 0,
        dead_letter=DEAD_LETTER if dead_letter else None,
    )


async def grant(cluster: DevCluster, *rules: AclRule) -> None:
    """Alice's rules, waited for until every hub lets her in."""
    async with open_region(cluster) as store:
        await store.acls.write_acl(CONSUMER, AclEntry(rules, source="test"), ANY_VERSION)
    for hub in cluster.addresses:
        async with HedwigClient([hub], security=security(cluster, CONSUMER)) as alice:
            await succeeds(
                lambda: alice.describe_lanes(TOPIC),
                ForbiddenError,
                what=f"alice's grant at {hub}",
            )


async def run(
    cluster: DevCluster,
    fault: Callable[[list[Consumer]], Awaitable[None]],
    *,
    owner_crashed: bool = False,
    after: float = 4.0,
    kind: SubscriptionType = SubscriptionType.SHARED,
    dead_letter: bool = False,
    delay_every: int = 0,
    delay_s: float = 0.0,
) -> QueueHistory:
    hubs = cluster.addresses
    await prepare(cluster, kind, dead_letter)
    env = consumer_env(cluster)
    # The first is slow (50 ms a message): it always holds messages when a fault kills it.
    consumers = [
        Consumer(
            i, hubs, TOPIC, SUB, kind, 0.05 if i == 0 else 0.002, env=env, nack_poison=dead_letter
        )
        for i in range(3)
    ]
    for c in consumers:
        await c.ready()
    keyed = kind is SubscriptionType.KEY_SHARED
    work = Workload(
        hubs,
        [TOPIC],
        publishers=2,
        subscribers=0,
        rate=150,
        keys=16 if keyed else 0,
        security=security(cluster),
        delay_every=delay_every,
        delay_s=delay_s,
    )
    await work.start()
    await asyncio.sleep(2.0)
    await fault(consumers)
    await asyncio.sleep(after)
    published = await work.finish()
    check(published)
    history = QueueHistory()
    history.log, history.mark = await settle(hubs, TOPIC, SUB, security=security(cluster))
    if dead_letter:
        history.dead_letters = await read_dead_letters(
            hubs, TOPIC, DEAD_LETTER, security=security(cluster)
        )
    for c in consumers:
        await c.stop()
        c.record(history)
    notes = check_queue(history, owner_crashed=owner_crashed, per_key=keyed)
    log.info(
        "%d messages, %d deliveries (%d of a message delivered before), %d counted "
        "redeliveries, %s",
        len(history.log),
        len(history.delivered),
        len(history.delivered) - len({seq for _, seq, _, _ in history.delivered}),
        history.redeliveries,
        notes or "no repeated counts",
    )
    return history


async def test_a_consumer_killed_mid_message_and_one_joining(plain_or_secure: DevCluster) -> None:
    cluster = plain_or_secure

    async def fault(consumers: list[Consumer]) -> None:
        consumers[0].kill()
        await asyncio.sleep(1.0)
        kind = SubscriptionType.SHARED
        joined = Consumer(3, cluster.addresses, TOPIC, SUB, kind, env=consumer_env(cluster))
        await joined.ready()
        consumers.append(joined)

    history = await run(cluster, fault)
    assert history.redeliveries >= 1  # what the killed one held went to the others
    assert {i for i, _, _, _ in history.delivered} >= {1, 2, 3}


async def test_the_owner_killed_under_load(plain_or_secure: DevCluster) -> None:
    """While a tenth of the messages are always nacked and dead-lettered."""
    cluster = plain_or_secure

    async def fault(consumers: list[Consumer]) -> None:
        owner = await owner_of(cluster.zk, cluster.region, TOPIC)
        assert owner is not None
        cluster.hub_at(owner).kill()

    history = await run(cluster, fault, owner_crashed=True, after=SESSION + 5, dead_letter=True)
    assert history.dead_letters and history.nacked


async def test_key_shared_order_through_a_consumer_killed_and_one_joining(
    plain_or_secure: DevCluster,
) -> None:
    cluster = plain_or_secure

    async def fault(consumers: list[Consumer]) -> None:
        consumers[0].kill()
        await asyncio.sleep(1.0)
        kind = SubscriptionType.KEY_SHARED
        joined = Consumer(3, cluster.addresses, TOPIC, SUB, kind, env=consumer_env(cluster))
        await joined.ready()
        consumers.append(joined)

    history = await run(cluster, fault, kind=SubscriptionType.KEY_SHARED)
    assert history.keyed


async def test_delayed_messages_through_the_owner_killed(plain_or_secure: DevCluster) -> None:
    """A fifth of the messages delayed 3 s, the owner killed while some are due and others
    wait: the next owner finds them again in the log, none is lost and none comes early."""
    cluster = plain_or_secure

    async def fault(consumers: list[Consumer]) -> None:
        owner = await owner_of(cluster.zk, cluster.region, TOPIC)
        assert owner is not None
        cluster.hub_at(owner).kill()

    history = await run(
        cluster, fault, owner_crashed=True, after=SESSION + 5, delay_every=5, delay_s=3.0
    )
    assert len({seq for seq, _, _ in history.delayed}) >= 100
