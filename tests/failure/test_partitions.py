"""Partitions, slow disks and slow links under load, in the network lab; each checks the history.

Three hubs at 3/3/2, ZooKeeper and the client each in a namespace of their own
(``tests/failure/lab``), a 4 s ZooKeeper session, three publishers at 100 msg/s each over three
topics and two subscribers per topic. The victim is the owner of the first topic when the fault
starts. Each test measures the longest time its topics went without an acknowledgement while
the fault held ("pause"), prints it, and appends it to ``$HEDWIG_LAB_RESULTS`` if set.

Where failover must take at most the session timeout plus 2 s, the test asserts it
(``FailoverTooSlow``). Every test runs the full history check.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hedwig.metadata import open_store
from tests.cluster_helpers import eventually
from tests.failure.history import History, check
from tests.failure.lab.cluster import LabCluster, ProcessFault, longest_pause
from tests.failure.lab.disk import SlowDisk, slow_disk_unavailable
from tests.failure.lab.netns import Lab
from tests.failure.lab.partitions import cut, isolate, one_way
from tests.failure.lab.relay import SlowLink

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

SESSION = 4.0
BOUND = SESSION + 2.0  # the failover goal
HOLD = SESSION + 5.0  # partitions meant to cause a failover outlast the bound clearly
TOPICS = ["p/a", "p/b", "p/c"]


@pytest.fixture
def lc(lab: Lab, lab_dir: Path) -> Iterator[LabCluster]:
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION) as made:
        yield made


class FailoverTooSlow(AssertionError):
    """The victim's topics paused longer than the session timeout plus 2 s."""


# etcd expires a lease up to a refresh interval (a third of the TTL) plus its lessor's
# half-second check after the owner's last refresh, where ZooKeeper counts the session from
# the last heartbeat: a second more.
BOUND_ETCD = BOUND + 1.0


def assert_failover(out: Outcome, bound: float = BOUND) -> None:
    if out.victim_pause > bound:
        raise FailoverTooSlow(
            f"the victim's topics paused {out.victim_pause}s > {bound}s "
            f"(owners before {out.owners}, at the heal {out.owners_at_heal})"
        )


@dataclass
class Outcome:
    history: History
    owners: dict[str, str | None]
    victim: str
    fault_at: float
    healed_at: float
    owners_at_heal: dict[str, str | None]
    pauses: dict[str, float] = field(default_factory=dict)

    @property
    def victim_pause(self) -> float:
        """The longest pause of the topics the victim owned when the fault began."""
        return max(p for t, p in self.pauses.items() if self.owners[t] == self.victim)


async def scenario(
    lc: LabCluster,
    name: str,
    inject: Callable[[str], Awaitable[None]],
    *,
    hold: float = HOLD,
    after: float = 3.0,
    takeover: bool = False,
    victim_first: bool = False,
) -> Outcome:
    """Load, then ``inject(victim)`` for ``hold`` seconds, heal everything, load ``after``
    seconds more, then check the whole history. With ``takeover``, another client makes
    another hub take the victim's topics over while the fault holds
    (``LabCluster.force_takeover``; ``victim_first``: asking the victim first)."""
    work = lc.workload(TOPICS, rate=100.0)
    await work.start()
    try:
        await asyncio.sleep(2.0)  # load before the fault
        before = await work.acked_count()
        assert before > 0, "nothing acknowledged before the fault"
        owners = await lc.owners(TOPICS)
        victim = owners[TOPICS[0]]
        assert victim is not None
        fault_at = lc.note(f"{name}: victim {victim}")
        await inject(victim)
        victim_topics = [t for t in TOPICS if owners[t] == victim]
        extra: dict[str, list[tuple[bytes, int]]] = {}
        if takeover:
            await asyncio.gather(
                asyncio.sleep(hold),
                lc.force_takeover(
                    victim, victim_topics, extra, fault_at, victim_first=victim_first
                ),
            )
        else:
            await asyncio.sleep(hold)
        moved_to = await lc.owners(TOPICS)
        lc.heal_all()
        healed_at = lc.note("healed")
        await asyncio.sleep(after)
        history = await work.finish(timeout=20.0)  # subscribers catch up within a second or so
        for topic, acks in extra.items():
            history.acked[topic].extend(acks)  # checked like the workload's own
        out = Outcome(history, owners, victim, fault_at, healed_at, moved_to)
        out.pauses = {
            t: round(longest_pause(history.topic_ack_times[t], fault_at, healed_at), 2)
            for t in TOPICS
        }
    except BaseException:
        await work.abort()
        raise
    report(name, out, lc)
    assert history.acked_count > before, "publishing did not resume after the fault"
    assert max(history.ack_times) > healed_at, "nothing acknowledged after the heal"
    check(history)
    return out


def report(name: str, out: Outcome, lc: LabCluster) -> None:
    line = {
        "scenario": name,
        "victim_pause_s": out.victim_pause,
        "pauses_s": out.pauses,
        "victim": out.victim,
        "owners_before": out.owners,
        "owners_at_heal": out.owners_at_heal,
        "acked": out.history.acked_count,
        "failed": out.history.failed,
        "hold_s": round(out.healed_at - out.fault_at, 2),
    }
    print(json.dumps(line))
    print(lc.summary())
    path = os.environ.get("HEDWIG_LAB_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


def metric_sum(lc: LabCluster, address: str, series: str, label: str = "") -> float:
    """The sum of the hub's ``series`` samples (those whose labels hold ``label``)."""
    with urllib.request.urlopen(lc.hub(address).metrics_url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(series + "{") and label in line
    )


def losses(lc: LabCluster, address: str) -> float:
    return metric_sum(lc, address, "hedwig_topic_losses_total")


async def test_owner_cut_off_from_zookeeper(lc: LabCluster) -> None:
    """The owner still reaches its replicas and clients, not ZooKeeper: its session expires,
    another hub takes its topics over (fencing the ledger), and it steps down."""

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    out = await scenario(lc, "owner cut off from ZooKeeper", inject, takeover=True)
    assert_failover(out)


async def test_owner_cut_off_from_zookeeper_asked_after_its_session(lc: LabCluster) -> None:
    """The etcd scenario of the same name on ZooKeeper: once the victim's records are gone
    the controller's publish goes to it first. On etcd it refuses (its lease ended by its own
    clock); on ZooKeeper it cannot tell its session's end from ZooKeeper's outage, in which it
    must go on serving (``test_publishing_goes_on_through_a_zookeeper_outage``). It used to
    acknowledge on its unfenced ledger, its clients stayed, and nobody claimed the topic while
    the cut lasted (no history was at risk: a claim elsewhere fences it first). It now asks the
    other hubs, which reach ZooKeeper, whether its session is over
    (``hedwig.hub.owning.witnesses``), and once one finds its registration gone it refuses, and
    another hub takes over."""

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    name = "owner cut off from ZooKeeper, asked after its session"
    out = await scenario(lc, name, inject, takeover=True, victim_first=True)
    assert_failover(out)


# The draining owner's link to ZooKeeper is slowed this much each way, so that its hand-offs
# (each a few ZooKeeper round trips) are still under way when the link is cut.
DRAIN_DELAY = 0.5


def answered_hub_alive(lc: LabCluster, address: str) -> float:
    """How many HUB_ALIVE questions the hub at ``address`` answered, whatever the answer."""
    return metric_sum(lc, address, "hedwig_requests_total", 'op="hub_alive"')


@pytest.fixture
def drain_lc(lab: Lab, lab_dir: Path) -> Iterator[LabCluster]:
    """``lc`` with each hub's HTTP endpoint on every address of its machine: a hub drains
    only for a caller on its own machine (loopback), as the pod's preStop hook is."""
    args = ["--metrics-host", "0.0.0.0"]
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION, hub_args=args) as made:
        yield made


async def test_draining_owner_cut_off_from_zookeeper(drain_lc: LabCluster) -> None:
    """The owner drains (``hedwig drain`` on its own machine, as the pod's preStop hook
    runs it): it takes its registration out of ZooKeeper first, then hands its topics over.
    Its link to ZooKeeper is slowed so the hand-offs take seconds, and cut the moment its
    registration is gone. Its registration's absence says nothing about its session (it took
    it out itself), so it must not ask the other hubs, whose "not alive" would be about the
    registration: it serves on until its session really ends; then the others take its topics
    over by fencing its ledgers. Nothing acknowledged may be lost or doubled; the drain
    itself ends once the link is back (``test_a_draining_hub_cut_off_from_the_store_is_not_
    told_its_session_ended`` is the same in memory)."""
    lc = drain_lc
    port = int(lc.dev.zk.rpartition(":")[2])
    drains: list[asyncio.Task[subprocess.CompletedProcess[str]]] = []
    asked: list[float] = []

    async def inject(victim: str) -> None:
        node = lc.hub_node(victim)
        link = SlowLink(lc.lab, node, lc.zk_node, port, DRAIN_DELAY)
        lc.add_fault(link.start())
        # the test: long enough on the slow link to reconnect through it, the session kept
        await asyncio.sleep(2 * DRAIN_DELAY + 1.0)
        metrics_port = str(lc.hub(victim).metrics_port)
        command = [*node.host.launch, sys.executable, "-m", "hedwig", "drain", "--host",
                   "127.0.0.1", "--metrics-port", metrics_port, "--timeout", "120"]  # fmt: skip
        drains.append(
            asyncio.create_task(
                asyncio.to_thread(subprocess.run, command, capture_output=True, text=True)
            )
        )
        store = open_store(lc.dev.zk, region=lc.region)
        await store.start()
        try:

            async def unregistered() -> bool:
                return not any(
                    h.address == victim and h.alive for h in await store.hubs.list_hubs()
                )

            await eventually(unregistered, timeout=20, interval=0.05)
        finally:
            await store.close()
        lc.note("the victim's registration is gone")
        # Asked before, while its connection was moved onto the relay: it was accepting then.
        asked.append(sum(answered_hub_alive(lc, a) for a in lc.dev.addresses if a != victim))
        lc.add_fault(cut(node, [lc.zk_node]))
        lc.undo(link)  # its connections through the relay close; direct ones are cut

    out = await scenario(lc, "draining owner cut off from ZooKeeper", inject, takeover=True)
    drained = await asyncio.wait_for(drains[0], 150)
    assert drained.returncode == 0, drained.stderr
    others = [a for a in lc.dev.addresses if a != out.victim]
    now = sum(answered_hub_alive(lc, a) for a in others)
    assert now == asked[0], f"the draining hub asked {now - asked[0]} times"


async def test_owner_cut_off_from_replicas(lc: LabCluster) -> None:
    """The owner reaches ZooKeeper and clients but neither other hub: it cannot write, so it
    must give its topics up, and the others recover them from the two replicas they hold."""

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), lc.other_hubs(victim)))

    out = await scenario(lc, "owner cut off from its replicas", inject)
    assert_failover(out)


# The same two failovers on a secured cluster: TLS and ACLs on the client listeners, the
# storage writes, recovery and fencing of the takeover over the hubs' mutual-TLS internal
# listeners, ZooKeeper records under their digest ACLs; the clients are the super-user.


@pytest.fixture
def secure_lc(lab: Lab, lab_dir: Path) -> Iterator[LabCluster]:
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION, secure=True) as made:
        yield made


async def test_secure_owner_cut_off_from_zookeeper_asked_after_its_session(
    secure_lc: LabCluster,
) -> None:
    """``test_owner_cut_off_from_zookeeper_asked_after_its_session`` secured: the victim asks
    the other hubs whether its session is over on their mutual-TLS internal listeners (a
    client's certificate or token is refused there: ``tests/security/test_probes.py``)."""
    lc = secure_lc
    assert lc.dev.security is not None

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    name = "secured: owner cut off from ZooKeeper, asked after its session"
    out = await scenario(lc, name, inject, takeover=True, victim_first=True)
    assert_failover(out)


async def test_secure_owner_cut_off_from_replicas(secure_lc: LabCluster) -> None:
    lc = secure_lc
    assert lc.dev.security is not None

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), lc.other_hubs(victim)))

    out = await scenario(lc, "secured: owner cut off from its replicas", inject)
    assert_failover(out)


# The store partitions again with etcd as the store: the owner's records are bound to its
# leases, which it cannot refresh from behind the partition; etcd expires them after the TTL
# (the session timeout) and another hub claims. Secured: etcd over TLS with client
# certificates and its own authentication, Hedwig's user confined to its prefix.


@pytest.fixture
def etcd_lc(lab: Lab, lab_dir: Path) -> Iterator[LabCluster]:
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION, store="etcd") as made:
        yield made


@pytest.fixture
def secure_etcd_lc(
    lab: Lab, lab_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[LabCluster]:
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION, secure=True, store="etcd") as made:
        assert made.dev.security is not None
        for name, value in made.dev.security.store_env().items():
            monkeypatch.setenv(name, value)  # this process reads owners from etcd too
        yield made


async def test_owner_cut_off_from_etcd(etcd_lc: LabCluster) -> None:
    """The owner reaches its replicas and clients, not etcd: its leases expire, another hub
    takes its topics over (fencing the ledger), and it acknowledges nothing more."""
    lc = etcd_lc
    assert lc.dev.zk.startswith("etcd://")

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    out = await scenario(lc, "owner cut off from etcd", inject, takeover=True)
    assert_failover(out, BOUND_ETCD)


async def test_secure_owner_cut_off_from_etcd(secure_etcd_lc: LabCluster) -> None:
    lc = secure_etcd_lc

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    out = await scenario(lc, "secured: owner cut off from etcd", inject, takeover=True)
    assert_failover(out, BOUND_ETCD)


async def test_secure_owner_cut_off_from_etcd_refuses_once_its_lease_ends(
    secure_etcd_lc: LabCluster,
) -> None:
    """The owner reaches its replicas and clients, not etcd, and a client comes to it once
    its lease has ended (as one sent by another hub that still sees it alive for a moment
    would). It used to serve on: its lease refresh waited 10 s for an answer that never came,
    so it kept its topics with their records gone, and, once it knew, left its clients
    waiting on store calls; nobody claimed the topics while the cut lasted (a full suite's
    load once showed it). It now refuses at once, its session over by its own clock, and
    another hub takes the topics over."""
    lc = secure_etcd_lc

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.hub_node(victim), [lc.zk_node]))

    name = "secured: owner cut off from etcd, asked after its lease"
    out = await scenario(lc, name, inject, takeover=True, victim_first=True)
    assert_failover(out, BOUND_ETCD)


# A link to etcd slowed this much each way answers a lease refresh after a whole lease (4 s)
# by the owner's clock, though etcd gets the refresh, late, and renews the lease.
ETCD_DELAY = 2.0


async def test_owner_link_to_etcd_slowed_past_its_lease(etcd_lc: LabCluster) -> None:
    """The owner's link to etcd is slowed, not cut: every packet 2 s late each way (a relay).
    etcd still gets each lease refresh and renews the lease, but the answer comes 4 s after
    the refresh was sent, when the lease may have ended for all the owner can tell: it must
    count its session over by its own clock, refuse, and give its records up, and another
    hub takes its topics over once etcd lets the lease go (a delay after its last late
    refresh). Nothing it acknowledged may be lost or doubled by the new owner."""
    lc = etcd_lc
    assert lc.dev.etcd_server is not None
    port = lc.dev.etcd_server.port

    async def inject(victim: str) -> None:
        link = SlowLink(lc.lab, lc.hub_node(victim), lc.zk_node, port, ETCD_DELAY)
        lc.add_fault(link.start())

    out = await scenario(lc, "etcd: owner's link to etcd 2 s slow", inject, takeover=True)
    # The lease lasts a refresh's one-way delay longer at etcd than the owner counts it.
    assert_failover(out, BOUND_ETCD + ETCD_DELAY)
    assert losses(lc, out.victim) >= 1, "the slowed owner never gave its topics up"


async def test_isolated_owner_heals_on_etcd(etcd_lc: LabCluster) -> None:
    """Cut from everything past its leases, then healed: the others took over; the old owner
    finds its leases gone, drops its topics, and comes back with new ones."""
    lc = etcd_lc

    async def inject(victim: str) -> None:
        lc.add_fault(isolate(lc.lab, lc.hub_node(victim)))

    out = await scenario(lc, "etcd: isolated owner, healed", inject, after=5.0)
    assert losses(lc, out.victim) >= 1, "the isolated owner never noticed it lost its topics"
    assert_failover(out, BOUND_ETCD)


async def test_client_cut_off_from_owner(lc: LabCluster) -> None:
    """The clients cannot reach a healthy owner; the other hubs send them back to it. Nothing
    can move (the owner is fine), so publishes wait out the partition and then go through."""

    async def inject(victim: str) -> None:
        lc.add_fault(cut(lc.client, [lc.hub_node(victim)]))

    out = await scenario(lc, "client cut off from the owner", inject, hold=6.0)
    assert out.victim_pause <= 6.0 + BOUND, "publishing did not resume soon after the heal"


async def test_one_way_owner_to_zookeeper(lc: LabCluster) -> None:
    """The owner's packets no longer reach ZooKeeper, ZooKeeper's still reach the owner."""

    async def inject(victim: str) -> None:
        lc.add_fault(one_way(lc.hub_node(victim), lc.zk_node))

    out = await scenario(lc, "one way: owner to ZooKeeper dropped", inject, takeover=True)
    assert_failover(out)


async def test_one_way_zookeeper_to_owner(lc: LabCluster) -> None:
    """ZooKeeper's packets no longer reach the owner, the owner's still reach ZooKeeper: the
    owner hears nothing and reconnects in vain, its session expires; the clients still talk
    to it alone, so nobody else claims its topics. After the heal it finds its session gone,
    drops its topics and claims them again: publishers and subscribers must all go on.

    This found two bugs: the owner's consume-mark writes piled up while ZooKeeper was out of
    reach and then ran by the thousand, starving its claims; and a subscriber whose mark the
    old owner never wrote dropped the redeliveries as seen without consuming them, so the
    message window filled and the new owner sent nothing more."""

    async def inject(victim: str) -> None:
        lc.add_fault(one_way(lc.zk_node, lc.hub_node(victim)))

    await scenario(lc, "one way: ZooKeeper to owner dropped", inject, after=5.0)


async def test_isolated_owner_heals(lc: LabCluster) -> None:
    """The owner is cut from everything past its session, then the partition heals: the
    others took over, and the old owner rejoins, acknowledges nothing stale, steps down."""

    async def inject(victim: str) -> None:
        lc.add_fault(isolate(lc.lab, lc.hub_node(victim)))

    out = await scenario(lc, "isolated owner, healed", inject, after=5.0)
    assert losses(lc, out.victim) >= 1, "the isolated owner never noticed it lost its topics"
    assert_failover(out)


async def test_slow_link_owner_to_replica(lc: LabCluster) -> None:
    """The owner's connection to one replica is delayed 300 ms each way (a relay): the ack
    quorum of 2 is met by the other replica, nothing is lost, publishing goes on."""

    async def inject(victim: str) -> None:
        replica = lc.other_hubs(victim)[0]
        port = next(h.port for h in lc.dev.hub_procs if h.host.address == replica.ip)
        lc.add_fault(SlowLink(lc.lab, lc.hub_node(victim), replica, port, 0.3).start())

    out = await scenario(lc, "slow link owner -> replica (300 ms)", inject, hold=8.0)
    assert out.victim_pause <= BOUND, f"publishing paused {out.victim_pause}s on a slow link"


@pytest.fixture
def slow_disk(lab: Lab) -> Iterator[SlowDisk]:
    reason = slow_disk_unavailable()
    if reason:
        pytest.skip(reason)
    disk = SlowDisk(lab.id).create()
    yield disk
    disk.remove()


async def test_slow_disk_on_owner(lab: Lab, lab_dir: Path, slow_disk: SlowDisk) -> None:
    """Hub 0's fsyncs take 300 ms (dm-delay, or a preloaded fsync delay where the kernel has
    no device-mapper) while it owns every topic; then a 3 s stall per fsync."""
    node = lab.add_node("hub0")
    host = node.host
    if slow_disk.launch:
        host = type(host)(host.address, host.launch + slow_disk.launch)
    hub0_dir = lab_dir / "hub0"
    if slow_disk.kind == "dm-delay":
        hub0_dir.symlink_to(slow_disk.path, target_is_directory=True)
    with LabCluster(lab, lab_dir, session_timeout_s=SESSION, hub_hosts={0: host}) as lc:
        hub0 = lc.dev.hub_procs[0].address

        async def inject(victim: str) -> None:
            slow_disk.set_delay(300)
            lc.add_fault(ProcessFault(f"hub0 fsync +300 ms ({slow_disk.kind})",
                                      lambda: slow_disk.set_delay(0)))  # fmt: skip
            await asyncio.sleep(4.0)  # the test: a while on a slow disk, then a slower one
            slow_disk.set_delay(3000)
            lc.note("hub0 fsync +3000 ms")

        from hedwig.client import HedwigClient

        async with HedwigClient(lc.dev.addresses) as admin:
            for t in TOPICS:
                await admin.publish(t, b"pub-setup:0")  # created, then moved to hub 0
                if await lc.owner(t) != hub0:
                    await admin.move_topic(t, hub0)
        out = await scenario(lc, f"slow disk on the owner ({slow_disk.kind})", inject, hold=8.0)
    print(f"slow disk: victim {out.victim} (hub0 {hub0}), pauses {out.pauses}")
