"""The hub process: wires its parts together and runs them until told to stop.

The parts: ``LocalStorage`` (this hub's ledger replicas), ``TopicOwnership`` (which topics it
owns), ``HubRequests`` (what each request does), ``HubFrontEnd`` (connections, and the one
error boundary), ``HubLoops`` (periodic work), ``HubMetrics`` (the events every part reports).

Startup order matters: storage first (so recovered ledgers are readable), then the metadata
session and the ACL rules, then the internal and client ports (the external one too:
``hedwig.hub.process.external``), and only then the ``alive`` record, so no hub redirects a
client here before we can answer. Shutdown runs it backwards and hands every topic over
first, so clients move on at once instead of waiting for a session to expire.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hedwig.clock import Clock, SystemClock
from hedwig.errors import MetadataUnavailableError, UsageError
from hedwig.hub.front.access import AccessControl, ListenerRole
from hedwig.hub.front.acl_watch import AclWatcher, NoAclWatch
from hedwig.hub.front.admission import OpenDoor
from hedwig.hub.front.doorway import NoDoorway, doorway_for
from hedwig.hub.front.quotas import PublishQuotas
from hedwig.hub.front.server import ClientConnection, HubFrontEnd
from hedwig.hub.front.tls import GivenNetwork, HubNetworks, HubTls
from hedwig.hub.owning.choices import HubChoices
from hedwig.hub.owning.ownership import TopicOwnership
from hedwig.hub.owning.peers import HubDialer, PeerDirectory
from hedwig.hub.owning.witnesses import SessionWitnesses
from hedwig.hub.process.external import ExternalClients
from hedwig.hub.process.guard import HubGuard
from hedwig.hub.process.http import HealthServer
from hedwig.hub.process.identity import load_hub_id
from hedwig.hub.process.loops import HubLoops
from hedwig.hub.process.registration import HubRegistration
from hedwig.hub.process.stalls import StallWatch
from hedwig.hub.process.wiring import hub_requests
from hedwig.hub.replicating.replicator import RegionReplicator
from hedwig.hub.reporting.events import LossKind
from hedwig.hub.reporting.metrics import HubMetrics
from hedwig.hub.spreading.dead_letters import DeadLetterPublisher
from hedwig.hub.spreading.fanout import FanOut
from hedwig.hub.spreading.lanes import TopicLanes
from hedwig.hub.spreading.plans import TopicPlans
from hedwig.ledger.auditor import Auditor
from hedwig.ledger.replicas import LocalFirstReplicas
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata import open_store
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import HubLoad
from hedwig.net.transport import Listener, Network
from hedwig.protocol import MoveKind
from hedwig.protocol.connection import DEFAULT_MAX_FRAME_SIZE
from hedwig.security.tokens import TokenVerifier, parse_issuers
from hedwig.settings import HubConfig
from hedwig.settings.exposure import exposed_listeners, warning

log = logging.getLogger(__name__)

T = TypeVar("T")


class Hub:
    def __init__(
        self,
        config: HubConfig,
        *,
        store: MetadataStore | None = None,
        network: Network | None = None,
        clock: Clock | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.clock = clock or SystemClock()
        # TLS contexts from the configuration, or a network given (in memory) used as it is.
        self.tls: HubNetworks = (
            HubTls(config, self.clock) if network is None else GivenNetwork(network, config)
        )
        self.network: Network = self.tls.client_network
        # Listeners open to the network (allowed by `insecure`; a network given in memory is
        # this process's alone), said in the log, on /readyz and in hedwig_hub_insecure.
        self.exposed = exposed_listeners(config) if network is None else []
        self.internal_network: Network = self.tls.internal_network
        self.store: MetadataStore = store or open_store(
            config.connection.metadata_url,
            region=config.connection.region,
            session_timeout_s=config.connection.metadata_session_timeout_s,
            clock=self.clock,
        )
        self.metrics = HubMetrics(series_limit=config.placement.load_report_topics)
        self.metrics.insecure.set(1 if self.exposed else 0)
        self.address = config.connection.advertise or config.connection.listen
        self.internal_address = (
            config.security.internal_advertise or config.security.internal_listen or ""
        )
        # Ledgers name this hub's replicas by its id, kept with its data when its address moves.
        self.hub_id = load_hub_id(config.storage.data_dir, config.storage.hub_id)
        self.directory = PeerDirectory(self.store, self.clock)
        self.dialer = HubDialer(
            directory=self.directory,
            internal=bool(config.security.internal_listen),
            network=self.internal_network,
            clock=self.clock,
        )
        self.access = AccessControl(
            authenticate=config.security.authenticate,
            authorize=config.security.authorize,
            internal_plane=bool(config.security.internal_listen),
            verifier=TokenVerifier(parse_issuers(config.security.token_issuers)),
            super_users=config.security.super_user_set,
            events=self.metrics,
            clock=self.clock,
        )
        # A queue's dead letters, published for its creator as the region's rules allow.
        self.dead_letters = DeadLetterPublisher(
            address=lambda: self.address,
            store=self.store,
            dialer=self.dialer,
            clock=self.clock,
            permits=self.access.permits,
        )
        self.storage = LocalStorage(
            config.storage.data_dir, self.hub_id, log_bytes=config.storage.entry_log_bytes
        )
        self.replicas = LocalFirstReplicas(
            self.storage,
            network=self.internal_network,
            clock=self.clock,
            resolve=self.directory.storage_address,
            forget=self.directory.forget,
        )
        self.choices = HubChoices(
            address=self.address,
            hub_id=self.hub_id,
            config=config,
            store=self.store,
            clock=self.clock,
            rng=rng,
        )
        self.topics = TopicOwnership(
            address=self.address,
            config=config,
            store=self.store,
            replicas=self.replicas,
            clock=self.clock,
            events=self.metrics,
            choices=self.choices,
            on_change=self._topics_changed,
            dead_letters=self.dead_letters,
        )
        # Every owned topic replicated from each linked region (no links: nothing runs).
        self.replicator = RegionReplicator(
            config=config,
            ownership=self.topics,
            registry=self.metrics.registry,
            clock=self.clock,
            network=network,
        )
        self.witnesses = SessionWitnesses(
            directory=self.directory,
            replicas=self.replicas,
            names=lambda: (self.address, self.hub_id, self.internal_address),
            rng=rng,
        )
        self.topics.standing.session_over = lambda: self.witnesses.session_over(
            self.address, self.topics.epoch
        )
        self.plans = TopicPlans(store=self.store, clock=self.clock)
        self.fanout = FanOut(
            address=self.address,
            config=config,
            store=self.store,
            ownership=self.topics,
            plans=self.plans,
            dialer=self.dialer,
            clock=self.clock,
            events=self.metrics,
            dead_letters=self.dead_letters,
        )
        self.lanes = TopicLanes(plans=self.plans, store=self.store)
        # Publish rate quotas per namespace, from the policies the hub watches.
        self.quotas = PublishQuotas(
            policy_of=self.topics.namespaces.policy_of,
            clock=self.clock,
            throttled=self.metrics.namespace_throttled,
        )
        self.choices.lane_hint = self.lanes.hub_hint
        self.requests = hub_requests(
            topics=self.topics,
            fanout=self.fanout,
            lanes=self.lanes,
            plans=self.plans,
            access=self.access,
            store=self.store,
            dialer=self.dialer,
            metrics=self.metrics,
            storage=self.storage,
            replicator=self.replicator,
            quotas=self.quotas,
            address=lambda: self.address,
        )
        max_frame = max(DEFAULT_MAX_FRAME_SIZE, 2 * config.delivery.max_message_size + 65536)
        # With security entirely off there is nothing to check: the open door admits all.
        sec = config.security
        secured = bool(sec.authenticate or sec.internal_listen or sec.token_issuers)
        # Each listener's table of what serves each request.
        self.client_routes = self.requests.client_routes(
            with_storage=not config.security.internal_listen
        )
        self.internal_routes = self.requests.internal_routes()
        # What an unauthenticated connection may cost (nothing bounded with authentication off).
        doorway = doorway_for(config, clock=self.clock, events=self.metrics)
        self.front = HubFrontEnd(
            self.client_routes,
            max_frame_size=max_frame,
            events=self.metrics,
            admission=self.access if secured else OpenDoor(),
            doorway=doorway,
            clock=self.clock,
        )
        self.external = ExternalClients(self.front, self.store, config.connection, self.hub_id)
        self.internal_front = HubFrontEnd(
            self.internal_routes,
            max_frame_size=max_frame,
            events=self.metrics,
            admission=self.access,
            doorway=NoDoorway(doorway.closures),
            clock=self.clock,
            role=ListenerRole.INTERNAL,
            internal_peers=self.tls.internal_peers,
        )
        # Access taken back over time: /drain's callers, expired credentials, revoked rules.
        self.guard = HubGuard(
            access=self.access,
            authenticate=config.security.authenticate,
            clock=self.clock,
            connections=self._client_connections,
            served=lambda: [
                *((t.name, t.subscriptions) for t in self.topics.topics.values()),
                *((t.name, t.subs.by_name) for t in self.fanout.delivering.values()),
            ],
        )
        self.acl_watcher: AclWatcher | NoAclWatch = (
            AclWatcher(
                self.store,
                super_users=config.security.super_user_set,
                on_rules=self.guard.rules_changed,
                clock=self.clock,
            )
            if config.security.authorize
            else NoAclWatch()
        )
        self.auditor = Auditor(
            address=self.address,
            hub_id=self.hub_id,
            store=self.store,
            replicas=self.replicas,
            local=self.storage,
            wanted_size=self._wanted_size,
            delay_s=config.audit.rereplication_delay_s,
            full_interval_s=config.audit.audit_full_interval_s,
            clock=self.clock,
            last_claim_at=lambda: self.topics.stats.last_claim_at,
        )
        self.topics.takeover.suspect = self.auditor.suspect
        self.loops = HubLoops(
            config=config,
            store=self.store,
            ownership=self.topics,
            fanout=self.fanout,
            lanes=self.lanes,
            moves=self.requests.moves,
            auditor=self.auditor,
            storage=self.storage,
            metrics=self.metrics,
            clock=self.clock,
            connections=lambda: len(self._client_connections()),
            quotas=self.quotas,
        )
        # New topics are not placed on hubs a low-load drain is emptying.
        self.choices.drained = lambda: self.loops.rebalancer.drained
        self.choices.unreachable = self.replicas.suspected
        self.choices.owned = self.topics.owned_or_claiming
        self._listener: Listener | None = None
        self._internal_listener: Listener | None = None
        self._expiry: asyncio.Task[None] | None = None
        self._http: HealthServer | None = None
        self._ready = False
        self._stall_watch = StallWatch(
            on_stall=self.metrics.loop_stall_seconds.labels("loop").observe,
            on_gc_pause=self.metrics.loop_stall_seconds.labels("gc").observe,
            on_collection=lambda generation, took: self.metrics.gc_pause_seconds.labels(
                str(generation)
            ).observe(took),
        )
        self._stopping = False
        self.registration = HubRegistration(
            store=self.store,
            clock=self.clock,
            record=self._alive_record,
            registered=self._registered,
            serving=lambda: self._ready,
            stopping=lambda: self._stopping,
        )
        self.stopped = asyncio.Event()

    # lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        self.store.session.add_listener(self._on_session)
        await self._while_store_away("connecting to the metadata store", self.store.start)
        self.topics.takeover.defaults = await self._while_store_away(
            "reading the region's defaults", self.store.topics.read_region_defaults
        )
        await self._while_store_away("reading the access rules", self.acl_watcher.start)
        await self._while_store_away("reading the namespaces", self.topics.namespaces.start)
        if self.config.security.internal_listen:
            self._internal_listener = await self.internal_network.listen(
                self.config.security.internal_listen, self.internal_front.protocol
            )
            if not self.config.security.internal_advertise:
                self.internal_address = self._internal_listener.address
            self.loops.internal_address = self.internal_address
        self.loops.hub_id = self.hub_id
        self._listener = await self.network.listen(
            self.config.connection.listen, self.front.protocol
        )
        if not self.config.connection.advertise:
            self._set_address(self._listener.address)
        self.loops.external_address = await self.external.start(self.network, self.address)
        self.tls.start_reloading(self.config.security.cert_reload_interval_s)
        self.front.start_sweeping()
        if self.config.security.authenticate:
            self._expiry = asyncio.get_running_loop().create_task(self.guard.close_expired())
        if self.config.http.metrics_port is not None or self.config.http.drain_socket:
            self._http = HealthServer(
                self.metrics.registry,
                self.readiness,
                before_scrape=self.loops.refresh_gauges,
                drain=self.drain,
                drain_allowed=self.guard.drain_allowed,
            )
            if self.config.http.metrics_port is not None:
                await self._http.start(self.config.http.metrics_host, self.config.http.metrics_port)
            if self.config.http.drain_socket:
                await self._http.start_unix(self.config.http.drain_socket)
        if self.exposed:
            log.warning("%s", warning(self.exposed))
        await self._while_store_away("registering", self.registration.register)
        try:
            self.loops.check_hub_count(len(await self.store.hubs.list_hubs()))
        except MetadataUnavailableError as exc:  # counted again at every load report
            log.info("cannot count the region's hubs yet: %s", exc)
        if self.loops.short_of_hubs is not None:
            log.warning("%s", self.loops.short_of_hubs)
        self.loops.start()
        self.fanout.start()
        self.replicator.start()
        self._ready = True
        self.registration.started()
        self._stall_watch.start()
        self.metrics.session_changed(SessionState.CONNECTED)
        log.info(
            "hub %s serving region %r (epoch %d)",
            self.address,
            self.config.connection.region,
            self.topics.epoch,
        )

    def _alive_record(self) -> tuple[str, HubLoad]:
        return self.address, self.loops.first_report(self.internal_address, self.hub_id)

    def _client_connections(self) -> list[ClientConnection]:
        return [*self.front.connections, *self.external.connections]

    def _registered(self, epoch: int) -> None:
        self.topics.epoch = epoch

    async def _while_store_away(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        return await self.registration.while_store_away(what, step)

    def _set_address(self, address: str) -> None:
        """The bound address, once the port is known (listening on port 0)."""
        self.address = address
        self.choices.address = address
        self.topics.address = address
        self.auditor.address = address
        self.fanout.address = address

    async def drain(self, force: bool = False) -> int:
        """Stop taking topics and hand over every topic this hub owns; keeps serving the
        storage role (other hubs' ledgers) until the process is stopped. Returns the number of
        topics handed over.

        The last alive hub refuses (``UsageError``) unless ``force``: its topics would have
        nowhere to go, and would wait, unserved, for a hub to come back."""
        if not force and self.topics.topics:
            alive = [h for h in await self.store.hubs.list_hubs() if h.alive]
            if all(h.address == self.address for h in alive):
                raise UsageError(
                    f"hub {self.address} is the last alive hub of region "
                    f"{self.config.connection.region!r}: its {len(self.topics.topics)} topics "
                    "would have nowhere to go (drain with force to do it anyway)"
                )
        self._ready = False
        self.topics.accepting = False
        with contextlib.suppress(Exception):
            await self.store.hubs.unregister_hub(self.address)
        return await self._release_all(MoveKind.DRAIN, "hub draining")

    async def _release_all(self, kind: MoveKind, reason: str) -> int:
        await self.fanout.release_all()
        names = list(self.topics.topics)
        for name in names:
            self.metrics.released(name, kind)
        await self.topics.release_all(reason)
        return len(names)

    async def stop(self) -> None:
        """Graceful: stop claiming, hand every topic over, flush, deregister, close."""
        if self._stopping:
            await self.stopped.wait()
            return
        self._stopping = True
        self._ready = False
        self.topics.accepting = False
        log.info("hub %s stopping: releasing %d topics", self.address, len(self.topics.topics))
        # Without the store a hand-off cannot complete: bound the graceful part, then stop
        # anyway. The ledgers' fencing keeps an unfinished hand-off safe; the next owner recovers.
        budget = max(5.0, self.config.connection.metadata_session_timeout_s)
        with contextlib.suppress(Exception):
            await self.clock.wait_for(self.store.hubs.unregister_hub(self.address), budget / 2)
        await self.replicator.stop()
        try:
            await self.clock.wait_for(
                self._release_all(MoveKind.SHUTDOWN, "hub shutting down"), budget
            )
        except TimeoutError:
            log.warning("hand-offs did not finish within %.0f s; stopping anyway", budget)
            self.topics.drop_all(LossKind.STOPPED, "hub stopped")
        self.loops.stop()
        self.fanout.stop()
        self.dead_letters.close()
        self._stall_watch.stop()
        self.acl_watcher.stop()
        self.topics.namespaces.stop()
        if self._expiry is not None:
            self._expiry.cancel()
        self.tls.stop_reloading()
        self.front.stop_sweeping()
        for listener in (self._listener, self._internal_listener, self.external.listener):
            if listener is not None:
                listener.close()
        for conn in [*self._client_connections(), *self.internal_front.connections]:
            conn.close()
        if self._http is not None:
            await self._http.close()
        with contextlib.suppress(Exception):
            await self.clock.wait_for(self.store.close(), 5.0)
        await self.topics.takeover.lac_notices.close()
        self.replicas.close()
        await self.storage.close()
        self.stopped.set()

    def readiness(self) -> tuple[bool, str]:
        ready, why = self._readiness()
        # Whether ready or not, an open hub says so (the status is readiness alone).
        return ready, f"{why}\n{warning(self.exposed)}" if self.exposed else why

    def _readiness(self) -> tuple[bool, str]:
        if not self._ready:
            return False, "starting or stopping"
        if self.topics.suspended:
            return False, "metadata store session suspended or lost"
        short = self.loops.short_of_hubs
        if short is not None:
            return False, short
        return True, "ready"

    def _on_session(self, state: SessionState) -> None:
        self.metrics.session_changed(state)
        self.topics.on_session(state)
        self.registration.on_session(state)

    def _topics_changed(self) -> None:
        self.loops.topics_changed()
        self.replicator.topics_changed()

    async def _wanted_size(self, topic: str) -> int:
        config = await self.topics.takeover.topic_config(topic)
        return (config.replication or self.config.storage.replication_config).ensemble
