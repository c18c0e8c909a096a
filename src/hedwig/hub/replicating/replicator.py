"""A hub's replicator: every topic it owns replicated from each linked region that carries it
(``docs/architecture.md``, "Regions").

Rules:

- What runs follows what is owned: whenever the set of owned topics changes (the hub's
  ownership says so, ``topics_changed``) the replicator compares the open owned topics with
  the replications running, starts one (``TopicReplication``) per topic and carrying region
  that has none, and stops those whose topic is no longer owned here, or is owned afresh (a
  new ``OwnedTopic`` after a loss and a claim: its replication starts again from its log).
  So a replication starts with a topic's claim and take-over, and stops with its release,
  its loss, its move or its deletion, on whichever path that happens.
- A topic is replicated from the linked regions its configuration names (``regions``, the
  topic's own or the region's defaults, as read at its take-over), from every linked region
  when it names none (``ReplicationPolicy``). A region it names that is not linked is ignored.
- One client per linked region, shared by every topic replicated from it (connections to
  the remote hubs pooled, redirects followed to each topic's owner there), presenting this
  hub's identity for linked regions (``ReplicationSettings``: a certificate or a token, and
  the CA that signed the remote hubs').
- Metrics per region, never per topic (``metrics``): refreshed on every change and every
  ``GAUGE_INTERVAL_S``.
- Without links the replicator does nothing and starts no task.
"""

from __future__ import annotations

import asyncio
import contextlib

from prometheus_client import CollectorRegistry

from hedwig.client import HedwigClient
from hedwig.clock import Clock
from hedwig.flag import Flag
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.topic import TopicState
from hedwig.hub.replicating.links import ReplicationPolicy, carrying_regions
from hedwig.hub.replicating.metrics import ReplicationMetrics
from hedwig.hub.replicating.topic_replication import TopicReplication
from hedwig.net.transport import Network
from hedwig.protocol import Links
from hedwig.security.credentials import ClientSecurity
from hedwig.settings import HubConfig

GAUGE_INTERVAL_S = 5.0


class RegionReplicator:
    def __init__(
        self,
        *,
        config: HubConfig,
        ownership: TopicOwnership,
        registry: CollectorRegistry,
        clock: Clock,
        network: Network | None = None,
    ) -> None:
        self._local = config.connection.region
        self._settings = config.replication
        self.links = config.replication.links(self._local)
        self._ownership = ownership
        self._clock = clock
        self._network = network
        self.metrics = ReplicationMetrics(registry)
        self._clients: dict[str, HedwigClient] = {}
        self.running: dict[tuple[str, str], TopicReplication] = {}
        self._wake = Flag()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if not self.links:
            return
        s = self._settings
        security = ClientSecurity.build(
            tls_ca=s.region_link_ca,
            cert=s.region_link_cert,
            key=s.region_link_key,
            token_file=s.region_link_token_file,
        )
        for link in self.links:
            self._clients[link.region] = HedwigClient(
                list(link.endpoints),
                publisher_id=f"replicator-{self._local}",
                network=self._network,
                security=security,
                clock=self._clock,
            )
        self._wake.set()
        self._task = asyncio.get_running_loop().create_task(self._loop())

    def topics_changed(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        running, self.running = list(self.running.values()), {}
        await asyncio.gather(*(r.stop() for r in running))
        for client in self._clients.values():
            with contextlib.suppress(Exception):
                await client.close()
        self._clients.clear()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._wake.wait(), GAUGE_INTERVAL_S)
            self._wake.clear()
            await self._reconcile()
            self._refresh_gauges()

    async def _reconcile(self) -> None:
        wanted = {}
        every = carrying_regions(self.links, ReplicationPolicy())
        for name, owned in self._ownership.topics.items():
            if owned.state is not TopicState.OPEN:
                continue
            regions = owned.config.regions
            carried = (
                every
                if regions is None
                else carrying_regions(self.links, ReplicationPolicy(regions=frozenset(regions)))
            )
            for link in carried:
                wanted[(name, link.region)] = owned
        gone = [k for k, r in self.running.items() if wanted.get(k) is not r.owned]
        stopping = [self.running.pop(k) for k in gone]
        await asyncio.gather(*(r.stop() for r in stopping))
        for key, owned in wanted.items():
            if key not in self.running:
                rep = TopicReplication(
                    owned=owned,
                    region=key[1],
                    local_region=self._local,
                    client=self._clients[key[1]],
                    settings=self._settings,
                    clock=self._clock,
                    metrics=self.metrics,
                )
                rep.start()
                self.running[key] = rep

    def describe(self, request_id: int) -> Links:
        """Each link and how this hub's replication from it stands (``DescribeLinks``)."""
        now = self._clock.wall_ms()
        rows = []
        for link in self.links:
            reps = [r for r in self.running.values() if r.region == link.region]
            oldest = min((r.pending_since_ms for r in reps if r.pending_since_ms), default=0)
            rows.append(
                (
                    link.region,
                    ",".join(link.endpoints),
                    len(reps),
                    sum(r.lag for r in reps),
                    max(0, now - oldest) if oldest else 0,
                    self.metrics.totals.get(link.region, 0),
                )
            )
        return Links(
            request_id=request_id,
            region=self._local,
            regions=tuple(r[0] for r in rows),
            endpoints=tuple(r[1] for r in rows),
            topics=tuple(r[2] for r in rows),
            lag_messages=tuple(r[3] for r in rows),
            lag_ms=tuple(r[4] for r in rows),
            replicated=tuple(r[5] for r in rows),
        )

    def _refresh_gauges(self) -> None:
        now = self._clock.wall_ms()
        for link in self.links:
            reps = [r for r in self.running.values() if r.region == link.region]
            oldest = min((r.pending_since_ms for r in reps if r.pending_since_ms), default=0)
            m = self.metrics
            m.topics.labels(link.region).set(len(reps))
            m.lag_messages.labels(link.region).set(sum(r.lag for r in reps))
            m.lag_seconds.labels(link.region).set(max(0, now - oldest) / 1000 if oldest else 0)
