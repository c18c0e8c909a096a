"""A development cluster laid out in the lab: the metadata store, each hub and the client apart.

``LabCluster`` is ``DevCluster`` (the same processes ``hedwig dev up`` starts) given a host in
a namespace for the metadata store (ZooKeeper, or etcd with ``store="etcd"``; its node is
``zk_node`` either way) and for each hub, plus a ``client`` namespace for the workload. It
keeps every fault it injected (``add_fault``) so that ``heal_all`` and ``close`` undo them
whatever happened to the test: partitions, slow links, frozen and killed hubs.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import DevCluster, HubProcess
from hedwig.devcluster.hosts import Host
from hedwig.security import ClientSecurity
from tests.cluster_helpers import eventually, owner_of
from tests.failure.lab.netns import Lab, Node
from tests.failure.lab.partitions import heal
from tests.failure.lab.remote import RemoteWorkload


class Fault(Protocol):
    @property
    def description(self) -> str: ...

    def undo(self) -> None: ...


@dataclass
class LabCluster:
    lab: Lab
    base_dir: Path
    hubs: int = 3
    region: str = "lab"
    session_timeout_s: float = 4.0
    replication: str = "3/3/2"
    hub_args: list[str] = field(default_factory=list)
    # host overrides for hub i (e.g. a launch prefix that slows its disk)
    hub_hosts: dict[int, Host] = field(default_factory=dict)
    # TLS, authentication, ACLs, internal listeners, protected znodes (``DevCluster.secure``);
    # the workloads and takeovers then connect as the super-user.
    secure: bool = False
    # "zookeeper" or "etcd" (secured as in production when ``secure``)
    store: str = "zookeeper"
    cluster: DevCluster | None = field(default=None, init=False)
    faults: list[Fault] = field(default_factory=list, init=False)
    workloads: list[RemoteWorkload] = field(default_factory=list, init=False)
    events: list[tuple[float, str]] = field(default_factory=list, init=False)
    _t0: float = field(default_factory=time.monotonic, init=False)
    _takeovers: Iterator[int] = field(default_factory=itertools.count, init=False)

    def start(self) -> LabCluster:
        zk = self.lab.add_node("zk")
        nodes = [self.lab.add_node(f"hub{i}") for i in range(self.hubs)]
        self.lab.add_node("client")
        self.cluster = DevCluster(
            hubs=self.hubs,
            region=self.region,
            base_dir=str(self.base_dir),
            session_timeout_s=self.session_timeout_s,
            replication=self.replication,
            hub_args=self.hub_args,
            zk_host=zk.host,
            hub_hosts=[self.hub_hosts.get(i, n.host) for i, n in enumerate(nodes)],
            secure=self.secure,
            store=self.store,
        )
        self.cluster.start()
        return self

    @property
    def dev(self) -> DevCluster:
        assert self.cluster is not None
        return self.cluster

    @property
    def client(self) -> Node:
        return self.lab.node("client")

    @property
    def zk_node(self) -> Node:
        return self.lab.node("zk")

    def hub_node(self, address: str) -> Node:
        return self.lab.node_at(address.rpartition(":")[0])

    def hub(self, address: str) -> HubProcess:
        return self.dev.hub_at(address)

    def other_hubs(self, address: str) -> list[Node]:
        return [self.hub_node(a) for a in self.dev.addresses if a != address]

    async def owner(self, topic: str) -> str | None:
        return await owner_of(self.dev.zk, self.region, topic)

    async def owners(self, topics: list[str]) -> dict[str, str | None]:
        return {t: await self.owner(t) for t in topics}

    def client_security(self) -> dict[str, str] | None:
        """``ClientSecurity.build`` arguments of the super-user, on a secured cluster."""
        if self.dev.security is None:
            return None
        env = self.dev.security.client_env()
        return {
            "tls_ca": env["HEDWIG_TLS_CA"],
            "cert": env["HEDWIG_CERT"],
            "key": env["HEDWIG_KEY"],
        }

    def workload(self, topics: list[str], **settings: Any) -> RemoteWorkload:
        if self.secure:
            settings.setdefault("security", self.client_security())
        work = RemoteWorkload(
            self.client.host.launch,
            self.base_dir / "workload.log",
            hubs=self.dev.addresses,
            topics=topics,
            **settings,
        )
        self.workloads.append(work)
        return work

    def note(self, what: str) -> float:
        """Record an event, also in ``events.log`` at once (a run that hangs still tells what
        it did); its time (``time.monotonic``)."""
        now = time.monotonic()
        self.events.append((now, what))
        with open(self.base_dir / "events.log", "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {now - self._t0:8.2f}s  {what}\n")
        return now

    def add_fault(self, fault: Fault) -> Fault:
        self.faults.append(fault)
        self.note("inject: " + fault.description)
        return fault

    def undo(self, fault: Fault) -> None:
        fault.undo()
        with contextlib.suppress(ValueError):
            self.faults.remove(fault)
        self.note("undo: " + fault.description)

    def heal_all(self) -> None:
        """Undo every fault: partitions, slow links, frozen hubs; restart killed hubs."""
        for fault in reversed(self.faults):
            with contextlib.suppress(Exception):
                fault.undo()
        self.faults.clear()
        heal(self.lab)
        if self.cluster is not None:
            for h in self.cluster.hub_procs:
                h.thaw()

    async def force_takeover(
        self,
        victim: str,
        topics: list[str],
        acked: dict[str, list[tuple[bytes, int]]],
        fault_at: float,
        *,
        victim_first: bool = False,
    ) -> None:
        """Once the victim's session has expired (its owner records gone), publish to its
        topics from the controller through the other hubs only: one of them claims each topic,
        fencing the victim's ledger, after which the victim must acknowledge nothing more (the
        history check would find a lost acknowledgement). The acknowledgements go to ``acked``
        (publishers ``pubctl<n>``) for the history check; the takeover is noted with its time.

        ``victim_first``: the publishes go to the victim first, as those of a client another
        hub redirected there would (that hub still seeing the victim alive): a victim that
        knows its session is over refuses them, and the client goes on to the others."""

        async def released() -> bool:
            return victim not in (await self.owners(topics)).values()

        await eventually(released, timeout=3 * self.session_timeout_s, interval=0.2)
        self.note(f"victim's owner records gone after {time.monotonic() - fault_at:.2f}s")
        others = [a for a in self.dev.addresses if a != victim]
        if victim_first:
            # the test's timeline: the victim's lease ended by its clock too
            await asyncio.sleep(0.5)
            others = [victim, *others]
        # A fresh publisher id each time: a client that reused one would restart its sequence
        # numbers and be (rightly) deduplicated against the earlier messages.
        publisher = f"pubctl{next(self._takeovers)}"
        retry = RetryPolicy(deadline_s=20)
        built = self.client_security()
        security = (
            ClientSecurity.build(tls_ca=built["tls_ca"], cert=built["cert"], key=built["key"])
            if built
            else None
        )
        async with HedwigClient(
            others, retry=retry, publisher_id=publisher, security=security
        ) as client:
            for n, topic in enumerate(topics):
                value = b"%s:%d" % (publisher.encode(), n)
                result = await client.publish(topic, value)
                acked.setdefault(topic, []).append((value, result.seq))
        new = await self.owners(topics)
        self.note(f"taken over after {time.monotonic() - fault_at:.2f}s: {new}")

        async def taken_over() -> bool:
            # The acknowledgements above came from another hub; a record read a moment later
            # may be gone again for a moment (a full suite's load once showed one missing
            # right after: that hub handing the topic on, or losing it and the workload's
            # next publish claiming it again). Never the victim's, though.
            now = await self.owners(topics)
            assert victim not in now.values(), f"the victim owns again: {now}"
            new.update(now)
            return all(now[t] is not None for t in topics)

        try:
            await eventually(taken_over, timeout=3 * self.session_timeout_s, interval=0.2)
        except AssertionError as exc:
            raise AssertionError(f"no takeover: {new}") from exc

    def summary(self) -> str:
        return "\n".join(f"{t - self._t0:8.2f}s  {what}" for t, what in self.events)

    def close(self) -> None:
        for w in self.workloads:
            w.kill()
        with contextlib.suppress(Exception):
            self.heal_all()
        if self.cluster is not None:
            for h in self.cluster.hub_procs:
                with contextlib.suppress(Exception):
                    h.kill()  # no graceful hand-off needed: the lab goes next
            self.cluster.stop()

    def __enter__(self) -> LabCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class ProcessFault:
    """A fault done to a process (freeze, kill), undone by ``undo`` (thaw, restart)."""

    description: str
    _undo: Callable[[], object]
    active: bool = True

    def undo(self) -> None:
        if self.active:
            self.active = False
            self._undo()


def longest_pause(times: list[float], start: float, end: float) -> float:
    """The longest time without an acknowledgement between ``start`` and ``end``.

    Counted from the last acknowledgement before ``start`` (the pause began then), to the
    first one after it, and so on up to ``end`` (a topic that never resumed paused until then).
    """
    before = [t for t in times if t <= start]
    points = [before[-1] if before else start]
    points += sorted(t for t in times if start < t <= end)
    points.append(end)
    return max(b - a for a, b in itertools.pairwise(points))
