"""One background task per HubPool: status refresh and rebalancing, on their own intervals.

Why not kopf timers or daemons: kopf puts a finalizer on every object that has one, so every
Topic and pool would be stuck in Terminating whenever the operator is not running (a pain
users of other operators report, load-balancing notes, complaint 9). Instead the operator
watches pools with an event handler (which needs no finalizer) and keeps a task per pool here;
the task re-applies the pool's children, deletes the external Services of hubs that are gone
(``hedwig_operator.pruning``: after their pods are), refreshes the pool's status and the
status of the pool's Topics every ``status_interval_s`` (the Topics within a budget per
second: ``refresh_topics``) and runs a rebalancing cycle every
``spec.rebalancing.intervalSeconds`` (with ``spec.autoscaling``, the pool's autoscaler runs in
it: ``hedwig_operator.rebalancing.autoscale``).
Topics thus need a finalizer only when their data must be deleted with them.

A change of the pool (a new watch event) wakes the task at once, so a new spec is acted on
without waiting for the next tick. Errors are logged and retried at the next tick; the task
stops when the pool is deleted or the operator shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from hedwig.errors import MetadataError
from hedwig.metadata import HubStatus
from hedwig_operator import metrics
from hedwig_operator.conditions import changed, find
from hedwig_operator.context import Context
from hedwig_operator.kube import KubeError, ObjectRef
from hedwig_operator.ownership import SecretRefusedError
from hedwig_operator.pools import apply_children, build_pool_status, statefulset_ref
from hedwig_operator.pruning import remove_retired_services
from hedwig_operator.rebalancing import RebalanceState, rebalance_cycle
from hedwig_operator.recorder import record_event
from hedwig_operator.resources import API_VERSION, POOL_KIND, TOPIC_KIND
from hedwig_operator.specs import PoolSpec, SpecError, parse_pool
from hedwig_operator.topics import TopicClaim, reconcile_topic

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]


@dataclass(frozen=True, slots=True)
class TopicEntry:
    """A Topic as the pool's worker sees it: its claim and its latest body."""

    claim: TopicClaim
    body: Mapping[str, Any]


# The Topics of a pool (by the claims index), read at each refresh.
TopicsOf = Callable[[PoolKey], Iterable[TopicEntry]]

# Topic refreshes under way at once: each waits on metadata reads (and maybe a hub claiming
# the topic), so a tick's share completes in a fraction of the interval, not one at a time.
REFRESHES_AT_ONCE = 16


def _urgency(body: Mapping[str, Any], alive: set[str]) -> int:
    """How soon a Topic's refresh is due, 0 first: 0, its status is wrong or unsettled (not
    Ready, or its owner no longer an alive hub: the owner died, a new one must be found);
    2, it looks fine; 3, its spec is not observed yet: kopf's create or update handler is
    about to reconcile it (refreshing it too would do that work twice: a burst of new Topics
    became Ready more slowly with it). 1 is for hot Topics (``refresh_topics``)."""
    meta, status = body.get("metadata") or {}, body.get("status") or {}
    if status.get("observedGeneration") != meta.get("generation"):
        return 3
    if status.get("owner") not in alive:
        return 0
    ready = [c for c in status.get("conditions") or [] if c.get("type") == "Ready"]
    return 0 if not ready or ready[0].get("status") != "True" else 2


class PoolWorker:
    def __init__(self, ctx: Context, body: Mapping[str, Any], topics_of: TopicsOf) -> None:
        self.ctx = ctx
        self.body = body
        self.topics_of = topics_of
        meta = body.get("metadata", {})
        self.key: PoolKey = (str(meta.get("namespace")), str(meta.get("name")))
        self.rebalance = RebalanceState()
        # When each Topic (namespace, name) was last refreshed (monotonic clock).
        self._refreshed: dict[tuple[str, str], float] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_rebalance: float | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            self.run(), name=f"hubpool-{self.key[0]}-{self.key[1]}"
        )

    def update(self, body: Mapping[str, Any]) -> None:
        """A newer version of the pool. Wakes the task only when the spec or annotations
        changed: the task's own status writes come back as events too, and must not make
        it refresh again at once."""
        old, self.body = self.body, body
        if _intent(old) != _intent(body):
            self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        clock = self.ctx.clock
        while True:
            self._wake.clear()
            delay = self.ctx.settings.status_interval_s
            try:
                pool = parse_pool(self.body)
            except SpecError as exc:
                log.warning("pool %s/%s: invalid spec: %s", *self.key, exc)
                pool = None
            if pool is not None:
                try:
                    await self.refresh(pool)
                except Exception:
                    log.exception("pool %s/%s: refresh failed", *self.key)
                now = clock.monotonic()
                if self._next_rebalance is None:
                    # The first cycle waits one interval: hubs' load reports need that long to
                    # mean anything after an operator restart.
                    self._next_rebalance = now + pool.rebalancing.interval_s
                if now >= self._next_rebalance:
                    try:
                        await self.rebalance_once(pool)
                    except Exception:
                        log.exception("pool %s/%s: rebalancing failed", *self.key)
                    self._next_rebalance = clock.monotonic() + pool.rebalancing.interval_s
                delay = min(delay, max(0.0, self._next_rebalance - clock.monotonic()))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)

    def pool_ref(self, pool: PoolSpec) -> ObjectRef:
        return ObjectRef(API_VERSION, POOL_KIND, pool.namespace, pool.name, pool.uid)

    async def refresh(self, pool: PoolSpec) -> None:
        """Repair the children (and remove the external Services of hubs that are gone),
        then refresh the pool's and its Topics' status."""
        ctx = self.ctx
        applied = True
        refused: SecretRefusedError | None = None
        try:
            pool = await apply_children(ctx.kube, pool, ctx.trust)
        except KubeError as exc:
            applied = False
            log.warning("pool %s: applying children failed: %s", pool.name, exc)
        except SecretRefusedError as exc:
            applied, refused = False, exc
            log.warning("pool %s/%s: %s", pool.namespace, pool.name, exc.message)
        statefulset = await ctx.kube.get(statefulset_ref(pool))
        hubs: list[HubStatus] | None = None
        zk_error = None
        try:
            store = await ctx.metadata.for_pool(pool)
            hubs = await store.hubs.list_hubs()
            ctx.trust.note_hubs(pool, [h.address for h in hubs])
        except MetadataError as exc:
            zk_error = f"ZooKeeper {pool.metadata_url}: {exc}"
        if applied:
            await self.remove_retired(pool, statefulset, hubs)
        previous = self.body.get("status") or {}
        status = build_pool_status(
            pool,
            statefulset=statefulset,
            hubs=hubs,
            zk_error=zk_error,
            previous=previous,
            now_ms=ctx.clock.wall_ms(),
            refused=refused,
        )
        was = (find(previous.get("conditions"), "Ready") or {}).get("reason")
        if refused is not None and was != refused.reason:
            await record_event(ctx.kube, self.body, refused.reason, refused.message, warning=True)
        if applied:
            status["observedGeneration"] = pool.generation
        if changed(previous, status):
            await ctx.kube.patch_status(self.pool_ref(pool), status)
        if hubs is not None:
            await self.refresh_topics(pool, hubs)

    async def remove_retired(
        self, pool: PoolSpec, statefulset: Mapping[str, Any] | None, hubs: list[HubStatus] | None
    ) -> None:
        """Delete the external Services of the hubs the pool no longer has, once they are
        gone (``hedwig_operator.pruning``), with an Event on the pool."""
        alive = None if hubs is None else {h.address for h in hubs if h.alive}
        try:
            removed = await remove_retired_services(self.ctx.kube, pool, statefulset, alive)
        except KubeError as exc:
            log.warning("pool %s: removing external Services failed: %s", pool.name, exc)
            return
        if removed:
            why = "spec.external was removed" if pool.external is None else "their hubs are gone"
            message = f"deleted {', '.join(removed)}: {why}"
            await record_event(self.ctx.kube, self.body, "ExternalServicesRemoved", message)

    async def refresh_topics(self, pool: PoolSpec, hubs: list[HubStatus]) -> None:
        """Refresh the status of the pool's Topics, within ``topic_refreshes_per_s``.

        A refresh reconciles the Topic again (its znode, an owner, its plan) and reads what
        its status shows. Refreshing every Topic every interval cost about six metadata reads
        per Topic per interval: with 100,000 Topics far more than one interval of work, paid
        for idle topics. Within the budget, first the Topics that need it (not Ready, owner
        gone), then the ones hubs report as hottest (their rates move), then the longest
        unrefreshed, and last those kopf's handlers are about to reconcile (``_urgency``).
        Creating or changing a Topic reconciles it at once
        (the kopf handlers): the refresh is for what changes behind the resource's back.
        """
        every = list(self.topics_of(self.key))
        # Claims by topic name (a Topic being deleted still holds its claim): each Topic's
        # conflict check looks at its rivals only, not at every claim of the pool.
        claims: dict[str, list[TopicClaim]] = {}
        for e in every:
            claims.setdefault(e.claim.topic_name, []).append(e.claim)
        entries = [e for e in every if not (e.body.get("metadata") or {}).get("deletionTimestamp")]
        alive = {h.address for h in hubs if h.alive}
        hot: set[str] = set()
        for h in hubs:
            if h.load is not None:
                hot.update(h.load.topic_loads)
        settings = self.ctx.settings
        budget = max(1, math.ceil(settings.topic_refreshes_per_s * settings.status_interval_s))
        never = -math.inf

        def priority(e: TopicEntry) -> tuple[int, float]:
            last = self._refreshed.get((e.claim.namespace, e.claim.name), never)
            urgency = _urgency(e.body, alive)
            if urgency == 2 and e.claim.topic_name in hot:
                urgency = 1
            return (urgency, last)

        chosen = (
            entries if len(entries) <= budget else heapq.nsmallest(budget, entries, key=priority)
        )
        present = {(e.claim.namespace, e.claim.name) for e in entries}
        for gone in self._refreshed.keys() - present:
            del self._refreshed[gone]
        todo = iter(chosen)

        async def refresher() -> None:
            for entry in todo:
                await self._refresh_topic(entry, claims[entry.claim.topic_name], hubs)

        await asyncio.gather(*(refresher() for _ in range(min(REFRESHES_AT_ONCE, len(chosen)))))

    async def _refresh_topic(
        self, entry: TopicEntry, claims: list[TopicClaim], hubs: list[HubStatus]
    ) -> None:
        self._refreshed[(entry.claim.namespace, entry.claim.name)] = self.ctx.clock.monotonic()
        try:
            status, _ = await reconcile_topic(
                self.ctx, entry.body, claims, pool_body=self.body, hubs=hubs
            )
        except KubeError as exc:
            log.warning("Topic %s: refresh failed: %s", entry.claim.name, exc)
            return
        if changed(entry.body.get("status") or {}, status):
            ref = ObjectRef(
                API_VERSION,
                TOPIC_KIND,
                entry.claim.namespace,
                entry.claim.name,
                entry.claim.uid,
            )
            try:
                await self.ctx.kube.patch_status(ref, status)
            except KubeError as exc:
                if not exc.not_found:
                    log.warning("Topic %s: status update failed: %s", entry.claim.name, exc)

    async def rebalance_once(self, pool: PoolSpec) -> None:
        def claims_of(topic: str) -> list[TopicClaim]:
            return [e.claim for e in self.topics_of(self.key) if e.claim.topic_name == topic]

        summary = await rebalance_cycle(self.ctx, pool, self.rebalance, claims_of)
        status: dict[str, Any] = {"lastRebalance": summary}
        if summary["moves"]:
            status["lastMoves"] = {"time": summary["time"], "moves": summary["moves"]}
        status["totalMoves"] = self.rebalance.total_moves
        previous = self.body.get("status") or {}
        autoscaling = self.rebalance.autoscaling.status or None
        if autoscaling is not None or previous.get("autoscaling") is not None:
            status["autoscaling"] = autoscaling  # None removes it (autoscaling switched off)
        # A quiet cycle that repeats the previous result is not worth a write.
        last = previous.get("lastRebalance") or {}
        if (
            summary["moves"]
            or last.get("result") != summary["result"]
            or (last.get("message") != summary["message"])
            or previous.get("autoscaling") != autoscaling
        ):
            await self.ctx.kube.patch_status(self.pool_ref(pool), status)


def _intent(body: Mapping[str, Any]) -> tuple[Any, Any, Any]:
    meta = body.get("metadata") or {}
    return (meta.get("generation"), meta.get("annotations"), meta.get("deletionTimestamp"))


class Workers:
    """The running PoolWorkers, by (namespace, name)."""

    def __init__(self, ctx: Context, topics_of: TopicsOf) -> None:
        self.ctx = ctx
        self.topics_of = topics_of
        self._workers: dict[PoolKey, PoolWorker] = {}

    def ensure(self, body: Mapping[str, Any]) -> PoolWorker:
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace")), str(meta.get("name")))
        worker = self._workers.get(key)
        if worker is None:
            worker = PoolWorker(self.ctx, body, self.topics_of)
            self._workers[key] = worker
            worker.start()
        else:
            worker.update(body)
        return worker

    def get(self, key: PoolKey) -> PoolWorker | None:
        return self._workers.get(key)

    async def stop(self, key: PoolKey) -> None:
        worker = self._workers.pop(key, None)
        if worker is not None:
            await worker.stop()

    async def pool_deleted(self, key: PoolKey) -> None:
        """Stop the pool's task and tell its Topics their pool is gone (their data stays)."""
        await self.stop(key)
        metrics.forget(*key)
        entries = list(self.topics_of(key))
        claims = [e.claim for e in entries]
        for entry in entries:
            status, _ = await reconcile_topic(self.ctx, entry.body, claims)
            ref = ObjectRef(
                API_VERSION, TOPIC_KIND, entry.claim.namespace, entry.claim.name, entry.claim.uid
            )
            try:
                await self.ctx.kube.patch_status(ref, status)
            except KubeError as exc:
                if not exc.not_found:
                    log.warning("Topic %s: status update failed: %s", entry.claim.name, exc)

    async def stop_all(self) -> None:
        for key in list(self._workers):
            await self.stop(key)
