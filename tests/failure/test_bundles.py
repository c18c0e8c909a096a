"""Fault scenarios under load on hubs that own topics by bundle (``--bundles``); each checks
the full history (``history.py``), as ``test_faults`` does for hubs owning topics one by one:
the owner of the topics' bundles killed, or frozen past its session, and bundles handed to a
joining hub, while publishers and subscribers run."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.errors import ForbiddenError
from hedwig.metadata import open_store
from tests.cluster_helpers import eventually, hedwig
from tests.failure.clusters import SESSION, cluster_332, security
from tests.failure.history import Workload, check
from tests.failure.test_faults import TOPICS, fences_answered, run, scrape, summed

pytestmark = pytest.mark.integration

# Few bundles, so that the workload's topics share one or two of them.
HUB_ARGS = ["--bundles", "--initial-bundles", "4"]


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[DevCluster]:
    with cluster_332(tmp_path, "bundle-faults", hub_args=HUB_ARGS) as c:
        yield c


async def bundle_owner(cluster: DevCluster, topic: str) -> str | None:
    """The owner of ``topic``'s bundle as the store has it (``None``: unowned)."""
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    try:
        bundles = await store.bundles.read_bundle_map()
        if bundles is None:
            return None
        got = await store.bundles.read_bundle_owner(bundles.value.bundle_of(topic).name)
        return got.value.address if got else None
    finally:
        await store.close()


async def beside(cluster: DevCluster, topic: str, n: int) -> list[str]:
    """``n`` topic names of ``topic``'s bundle, not the workload's."""
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    try:
        got = await store.bundles.read_bundle_map()
        assert got is not None
        bundle = got.value.bundle_of(topic)
    finally:
        await store.close()
    names = (f"f/beside/{i}" for i in range(100_000))
    return list(itertools.islice((t for t in names if bundle.holds(t)), n))


async def test_kill9_bundle_owner_under_load(cluster: DevCluster) -> None:
    victim: list[str] = []
    # Topics of the workload's bundle in use on its owner when it dies, asked for by nobody
    # after: taken over in bulk by the bundle's next owner (``bundle_recovery``).
    quiet: list[str] = []

    async def fault() -> None:
        owner = await bundle_owner(cluster, TOPICS[0])
        assert owner is not None
        victim.append(owner)
        quiet.extend(await beside(cluster, TOPICS[0], 20))
        async with HedwigClient(cluster.addresses) as c:
            await asyncio.gather(*(c.publish(t, t.encode()) for t in quiet))
        cluster.hub_at(owner).kill()

    await run(cluster, fault, after=SESSION + 4)
    # The victim's bundles were claimed by the others, and its topics' ledgers fenced there.
    now = await bundle_owner(cluster, TOPICS[0])
    assert now is not None and now != victim[0]
    assert fences_answered([h for h in cluster.hub_procs if h.address != victim[0]]) >= 1
    # Every quiet topic was taken over as the bundle was won, before any request for it.
    heir = [cluster.hub_at(now)]
    assert summed(heir, "hedwig_bundle_topics_recovered_total") >= len(quiet)
    async with HedwigClient([now]) as c:
        for t in quiet:
            answer = await c.read(t, 1, max_messages=10)
            assert [m.value for b in answer.batches for m in b.delivered()] == [t.encode()]


async def test_bundle_owner_frozen_past_its_session(cluster: DevCluster) -> None:
    frozen: list[str] = []

    async def fault() -> None:
        owner = await bundle_owner(cluster, TOPICS[0])
        assert owner is not None
        hub = cluster.hub_at(owner)
        hub.freeze()
        frozen.append(owner)

        async def taken_over() -> bool:
            now = await bundle_owner(cluster, TOPICS[0])
            return now is not None and now != owner

        await eventually(taken_over, timeout=SESSION * 5)
        await asyncio.sleep(1.0)
        hub.thaw()  # it must notice, acknowledge nothing more, and step down

    await run(cluster, fault, after=3)
    hub = cluster.hub_at(frozen[0])
    metrics = await asyncio.get_running_loop().run_in_executor(None, scrape, hub.metrics_url)
    losses = [
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("hedwig_topic_losses_total{")
    ]
    assert sum(losses) >= 1, "the frozen owner never noticed it lost its topics"


async def test_a_joining_hub_takes_bundles_under_load(tmp_path: Path) -> None:
    """Three hubs at 3/3/2 by bundle, publishers and subscribers on a dozen topics; a fourth
    hub joins and the others hand it its share from the ring (a balancing cycle a second):
    bundles move under load, every history whole."""
    topics = [f"j/{i}" for i in range(12)]
    args = ["--bundles", "--initial-bundles", "16", "--balance-interval", "1"]
    with cluster_332(tmp_path, "bundle-join", hub_args=args) as cluster:
        work = Workload(cluster.addresses, topics, senders=1)
        await work.start()
        await asyncio.sleep(2.0)
        acked_before = work.history.acked_count
        assert acked_before > 0
        joined = cluster.add_hub()  # (with the cluster's hub arguments, --bundles among them)

        async def took_some() -> bool:
            return joined.address in (await bundle_owners(cluster)).values()

        await eventually(took_some, timeout=20)
        await asyncio.sleep(3.0)  # load through and after the moves
        history = await work.finish()
        assert history.acked_count > acked_before, "publishing did not go on through the moves"
        check(history)


async def bundle_owners(cluster: DevCluster) -> dict[str, str]:
    store = open_store(cluster.zk, region=cluster.region)
    await store.start()
    try:
        return {n: o.value.address for n, o in (await store.bundles.bundle_owners()).items()}
    finally:
        await store.close()


async def test_a_bundle_moved_by_hand_under_load_on_a_secured_region(tmp_path: Path) -> None:
    """``hedwig move --bundle B --to H`` on a secured region, while publishers and subscribers
    run: refused to a principal that is not a super-user (whatever its ACLs) and for a name
    that is not a bundle; done for the super-user, the bundle claimed by the hub named, every
    history whole."""
    topics = [f"m/{i}" for i in range(6)]
    args = ["--bundles", "--initial-bundles", "8"]
    with cluster_332(tmp_path, "bundle-move", hub_args=args, secure=True) as cluster:
        assert cluster.security is not None
        admin = security(cluster)
        work = Workload(cluster.addresses, topics, senders=1, security=admin)
        await work.start()
        await asyncio.sleep(2.0)
        owners = await bundle_owners(cluster)
        bundle, source = next(iter(sorted(owners.items())))
        destination = next(a for a in cluster.addresses if a != source)

        async with HedwigClient([source], security=security(cluster, "alice")) as alice:
            with pytest.raises(ForbiddenError, match="super-users"):
                await alice.move_bundle(bundle, destination, owner=source)

        def move(name: str) -> subprocess.CompletedProcess[str]:
            env = {**os.environ, **cluster.security.client_env()}  # type: ignore[union-attr]
            common = ["--metadata", cluster.zk, "--region", cluster.region]
            return hedwig("move", "--bundle", name, "--to", destination, *common, env=env)

        odd = await asyncio.to_thread(move, "00000000_00000001")
        assert odd.returncode != 0 and "not a bundle of this region's map" in odd.stderr
        moved = await asyncio.to_thread(move, bundle)
        assert moved.returncode == 0, moved.stderr
        assert f"handed bundle {bundle} from {source} to {destination}" in moved.stdout

        async def claimed_there() -> bool:
            return (await bundle_owners(cluster)).get(bundle) == destination

        await eventually(claimed_there, timeout=20)
        acked = work.history.acked_count
        await asyncio.sleep(2.0)  # load through and after the move
        history = await work.finish()
        assert history.acked_count > acked, "publishing did not go on after the move"
        check(history)
