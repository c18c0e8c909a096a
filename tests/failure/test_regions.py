"""Two linked regions of real processes, each with its own ZooKeeper: region ``a`` of one hub
(1/1/1), region ``b`` of three (3/3/2), linked both ways (``--region-links``). A workload runs in
each (its own publishers and subscribers, ``history.Workload``); under it the hub of ``b``
that owns, and so replicates, the first topic is killed with ``kill -9`` and started again;
then the whole of ``a`` is killed the same way and started again.
Each region's history is checked as every fault scenario's is (``history.check``), and the
two together across regions (``regions.problems_across``): everything acknowledged in one
region is in the other's log exactly once, in its origin's order per publisher, and nothing
comes back to where it came from.

It runs plain and secured. Secured, each region is a secured development cluster (TLS,
client certificates, ACLs, default deny) with its own CAs; a CA of the links signs each
region's identity in the other (``region-a``, ``region-b``), which each region's client CA
bundle trusts, and an ACL there allows it what replication needs under ``r/`` (subscribe,
describe, create) and nothing else. A hub connects to the other region over TLS, verifying
its hubs against that region's hub CA (``--region-link-ca``), presenting its region's
identity (``--region-link-cert``/``--region-link-key``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.security import DevSecurity
from hedwig.devcluster.zookeeper import free_port
from hedwig.hub.replicating.topic_replication import subscription_name
from hedwig.metadata import ANY_VERSION
from hedwig.metadata.acls import AclEntry, AclRule, Operation, PatternType
from hedwig.security.ca import CertificateAuthority
from tests.failure.clusters import SESSION, open_region, security
from tests.failure.history import Workload, check
from tests.failure.regions import problems_across, read_with_origins

pytestmark = pytest.mark.integration

TOPICS = ["r/x", "r/y"]


def _ports(n: int) -> list[tuple[int, int]]:
    return [(free_port(), free_port()) for _ in range(n)]


def _secure_links(tmp_path: Path) -> dict[str, list[str]]:
    """Each region's credentials made beforehand (a development cluster reuses them), the
    links' CA added to each region's client CA bundle, and each region's hub arguments for
    reaching the other securely."""
    link_ca = CertificateAuthority.create("hedwig test region links", days=1)
    args: dict[str, list[str]] = {}
    for r in ("a", "b"):
        DevSecurity.create(tmp_path / r / "security")
    for r, other in (("a", "b"), ("b", "a")):
        here = tmp_path / r / "security"
        with (here / "client-ca.crt").open("ab") as bundle:
            bundle.write(link_ca.cert_pem)
        cert, key = link_ca.issue(f"region-{r}", client=True, days=1).write(here, "link")
        args[r] = [
            "--region-link-ca",
            str(tmp_path / other / "security" / "hub-ca.crt"),
            "--region-link-cert",
            str(cert),
            "--region-link-key",
            str(key),
        ]
    return args


async def _allow_replication(cluster: DevCluster, principal: str) -> None:
    rule = AclRule(
        principal,
        frozenset({Operation.SUBSCRIBE, Operation.DESCRIBE, Operation.CREATE}),
        name="r/",
        pattern=PatternType.PREFIX,
    )
    async with open_region(cluster) as store:
        await store.acls.write_acl(principal, AclEntry((rule,), source="test"), ANY_VERSION)


@pytest.fixture(params=[False, True], ids=["plain", "secure"])
def linked(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[dict[str, DevCluster]]:
    """Region ``a`` (one hub) and ``b`` (three), linked both ways on fixed ports."""
    secure: bool = request.param
    ports = {"a": _ports(1), "b": _ports(3)}
    links = {r: ",".join(f"127.0.0.1:{p}" for p, _ in ps) for r, ps in ports.items()}
    extra = _secure_links(tmp_path) if secure else {"a": [], "b": []}
    clusters = {
        r: DevCluster(
            hubs=len(ports[r]),
            region=r,
            session_timeout_s=SESSION,
            base_dir=str(tmp_path / r),
            hub_ports=ports[r],
            hub_args=["--region-links", f"{other}={links[other]}", *extra[r]],
            secure=secure,
        )
        for r, other in (("a", "b"), ("b", "a"))
    }
    try:
        for c in clusters.values():
            c.start()
        if secure:
            for r, other in (("a", "b"), ("b", "a")):
                asyncio.run(_allow_replication(clusters[r], f"region-{other}"))
        yield clusters
    finally:
        for c in clusters.values():
            c.stop()


async def converged(clusters: dict[str, DevCluster], acked: int, timeout: float = 60.0) -> None:
    """Until each region's logs hold as many messages as both workloads had acknowledged
    (replication catching up after the publishing stopped)."""
    deadline = time.monotonic() + timeout
    for c in clusters.values():
        async with HedwigClient(c.addresses, security=security(c)) as client:
            while True:
                total = 0
                for t in TOPICS:
                    total += (await client.topic_info(t)).last_seq
                if total >= acked or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.2)


async def test_kill9_of_the_replicating_owner_loses_and_repeats_nothing(
    linked: dict[str, DevCluster],
) -> None:
    works = {
        r: Workload(
            c.addresses,
            TOPICS,
            publishers=2,
            subscribers=1,
            rate=100.0,
            prefix=f"pub{r}",
            security=security(c),
        )
        for r, c in linked.items()
    }
    for w in works.values():
        await w.start()
    await asyncio.sleep(2.0)  # load before the fault
    b = linked["b"]
    async with open_region(b) as store:
        got = await store.ownership.read_owner_info(TOPICS[0])
    assert got is not None
    victim = b.hub_at(got.value.address)
    acked_before = sum(w.history.acked_count for w in works.values())
    victim.kill()
    await asyncio.sleep(SESSION + 3)  # load while b's topics are taken over
    victim.start()
    await asyncio.sleep(3.0)  # load after the restart
    # The whole of region a (its one hub) killed and started again: b's replicators from a
    # and a's from b both start over, from what a's log says.
    whole_a = linked["a"].hub_procs[0]
    whole_a.kill()
    await asyncio.sleep(2.0)  # region a down, under load in b
    whole_a.start()
    await asyncio.sleep(3.0)  # load after a is back
    for w in works.values():
        await w.stop_publishing()
    acked = sum(w.history.acked_count for w in works.values())
    assert acked > acked_before, "publishing did not resume after the fault"
    await converged(linked, acked)
    histories = {r: await w.finish() for r, w in works.items()}
    for h in histories.values():
        check(h)
    logs = {}
    for r, c in linked.items():
        async with HedwigClient(c.addresses, security=security(c)) as client:
            logs[r] = {t: await read_with_origins(client, t) for t in TOPICS}
    problems = problems_across(logs, histories)
    assert not problems, "\n".join(problems[:20])
    # Both directions carried messages, each through the hub subscription its region holds in
    # the other, made (secured) by that region's identity.
    for r, other in (("a", "b"), ("b", "a")):
        assert any(pid.startswith(f"@{other}/") for t in TOPICS for _, pid, _ in logs[r][t])
        async with open_region(linked[other]) as store:
            held = await store.subscriptions.read_subscription_data(TOPICS[0], subscription_name(r))
        assert held is not None
        secured = linked[other].security is not None
        assert held.value.owner == (f"region-{r}" if secured else None)
