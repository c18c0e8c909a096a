"""Which topics this hub owns: claiming, redirecting, watching and releasing (seed 000).

Rules, for a request on topic T that this hub does not already serve:

1. Create T's node if missing (topics are created lazily, on first use).
2. Read T's owner record. Another hub's record: redirect the client there. A record with our
   address but an older epoch is ours from a previous session: delete it (version-checked)
   and go on as if there were none.
3. No owner and the request was not redirected: choose a hub with the placement policy. If the
   choice is another hub, redirect there; the client comes back with the redirected flag.
4. No owner and the request was redirected (or we chose ourselves): claim, by creating the
   ephemeral owner record test-and-set. If that fails, someone else won: redirect to them.
5. Take over the log (recover the previous ledger, open a new one, CAS the ledger list). If
   that fails, release the claim and answer "unavailable, retry": never serve a topic whose
   history we could not recover.

Concurrent requests for the same topic share one claim. Once owned, the hub knows it still
owns T from its ZooKeeper session and a watch on the owner record, not by reading it on every
request: when the watch fires and the record is no longer ours, or the session is suspended for
longer than it can live, or lost, the topic is dropped at once and its clients are told.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

from hedwig.clock import Clock
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    InvalidTopicError,
    MetadataError,
    NoTopicOwnerInfoError,
)
from hedwig.hub.config import HubConfig
from hedwig.hub.topic import OwnedTopic, TopicState
from hedwig.ledger.handle import StoragePool
from hedwig.ledger.topic_log import LogSettings, TopicLog
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import (
    NEW_VERSION,
    HubInfo,
    HubStatus,
    TopicConfig,
    Version,
)
from hedwig.placement import choose_hub
from hedwig.protocol import status
from hedwig.protocol.names import validate_name

log = logging.getLogger(__name__)

# Messages at the end of a topic's log read back on take-over to rebuild duplicate detection.
DEDUP_WINDOW = 5000


@dataclass
class OwnershipStats:
    claims: int = 0
    claim_conflicts: int = 0
    redirects: int = 0
    releases: int = 0
    losses: int = 0


class TopicManager:
    def __init__(
        self,
        *,
        address: str,
        config: HubConfig,
        store: MetadataStore,
        pool: StoragePool,
        clock: Clock,
        rng: random.Random | None = None,
        on_change: Callable[[], None] | None = None,
        stats_hook: Callable[[str, str, int, int], None] | None = None,
        on_claimed: Callable[[float], None] | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self._on_claimed = on_claimed
        self._on_lost = on_lost
        self.address = address
        self.config = config
        self.store = store
        self.pool = pool
        self.clock = clock
        self.rng = rng or random.Random()
        self.epoch = 0
        self.topics: dict[str, OwnedTopic] = {}
        self._owner_versions: dict[str, Version] = {}
        self._claims: dict[str, asyncio.Future[OwnedTopic]] = {}
        self._hubs_cache: tuple[float, list[HubStatus]] | None = None
        self._suspended_since: float | None = None
        self._expiry_task: asyncio.Task[None] | None = None
        self.accepting = True
        self.stats = OwnershipStats()
        self._on_change = on_change or (lambda: None)
        self._stats_hook = stats_hook
        self.defaults = TopicConfig()

    # session ------------------------------------------------------------------------------

    def on_session(self, state: SessionState) -> None:
        if state is SessionState.SUSPENDED:
            # We may have lost the session without knowing yet. Stop taking writes; if the
            # connection does not come back within the session timeout, the session is surely
            # gone on the server side: drop every topic before another hub can claim it.
            self._suspended_since = self.clock.monotonic()
            if self._expiry_task is None or self._expiry_task.done():
                self._expiry_task = asyncio.get_running_loop().create_task(self._expire_later())
        elif state is SessionState.CONNECTED:
            self._suspended_since = None
            if self._expiry_task is not None:
                self._expiry_task.cancel()
                self._expiry_task = None
        elif state is SessionState.LOST:
            self._suspended_since = None
            self.drop_all("ZooKeeper session expired")

    async def _expire_later(self) -> None:
        await self.clock.sleep(self.config.zk_session_timeout_s * 0.9)
        if self._suspended_since is not None:
            self.drop_all("ZooKeeper unreachable for the session timeout")

    @property
    def suspended(self) -> bool:
        return self._suspended_since is not None

    def drop_all(self, reason: str) -> None:
        for name in list(self.topics):
            self._lose(name, reason)

    # resolving ----------------------------------------------------------------------------

    async def acquire(self, topic: str, *, redirected: bool) -> OwnedTopic:
        """The topic if this hub serves it (claiming it if the rules say so); else raises."""
        owned = self.topics.get(topic)
        if owned is not None and owned.state is TopicState.OPEN:
            if self.suspended:
                raise status.ServiceUnavailableError("hub is reconnecting to ZooKeeper; retry")
            return owned
        if owned is not None:
            raise status.TopicMovingError(f"topic {topic!r} is moving", detail=owned.moved_to)
        try:
            validate_name(topic)
        except InvalidTopicError as exc:
            raise status.InvalidTopicStatusError(str(exc)) from None
        if not self.accepting:
            raise status.ServiceUnavailableError("hub is shutting down", detail=None)
        if self.suspended:
            raise status.ServiceUnavailableError("hub is reconnecting to ZooKeeper; retry")
        pending = self._claims.get(topic)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[OwnedTopic] = asyncio.get_running_loop().create_future()
        self._claims[topic] = fut
        try:
            owned = await self._resolve(topic, redirected)
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            self._claims.pop(topic, None)
        fut.set_result(owned)
        return owned

    async def _resolve(self, topic: str, redirected: bool) -> OwnedTopic:
        try:
            await self.store.topics.ensure_topic(topic)
            for _attempt in range(3):
                owner = await self.store.ownership.read_owner_info(topic)
                if owner is not None:
                    info = owner.value
                    if info.address != self.address:
                        self.stats.redirects += 1
                        raise status.NotResponsibleError(
                            f"topic {topic!r} is owned by {info.address}", detail=info.address
                        )
                    # Our own record but not a topic we serve: left by an earlier session of
                    # ours, or by a take-over that failed. Remove it and claim afresh.
                    try:
                        await self.store.ownership.delete_owner_info(topic, owner.version)
                    except (BadVersionError, NoTopicOwnerInfoError):
                        continue
                if not redirected:
                    target = await self._choose(topic)
                    if target is not None and target != self.address:
                        self.stats.redirects += 1
                        raise status.NotResponsibleError(
                            f"topic {topic!r} is assigned to {target}", detail=target
                        )
                try:
                    version = await self.store.ownership.write_owner_info(
                        topic, HubInfo(self.address, self.epoch), NEW_VERSION
                    )
                except BadVersionError:
                    self.stats.claim_conflicts += 1
                    redirected = True  # someone claimed it: the next read finds them
                    continue
                return await self._take_over(topic, version)
            raise status.ServiceUnavailableError(f"topic {topic!r}: ownership is changing; retry")
        except status.ServerError:
            raise
        except MetadataError as exc:
            raise status.ServiceUnavailableError(f"metadata store: {exc}") from None

    async def _choose(self, topic: str) -> str | None:
        now = self.clock.monotonic()
        if self._hubs_cache is None or now - self._hubs_cache[0] > 1.0:
            self._hubs_cache = (now, await self.store.hubs.list_hubs())
        return choose_hub(
            self._hubs_cache[1],
            self.config.placement,
            topic,
            rng=self.rng,
            now_ms=self.clock.wall_ms(),
            max_age_ms=int(self.config.load_report_max_age_s * 1000),
        )

    async def topic_config(self, topic: str) -> TopicConfig:
        got = await self.store.topics.read_topic_config(topic)
        own = got.value if got else TopicConfig()
        return own.merged(self.defaults).merged(
            TopicConfig(
                self.config.replication_config,
                self.config.default_retention_ms,
                self.config.default_retention_bytes,
                self.config.max_message_size,
            )
        )

    async def _take_over(self, topic: str, version: Version) -> OwnedTopic:
        self.stats.claims += 1
        try:
            config = await self.topic_config(topic)
            replication = config.replication or self.config.replication_config
            ensemble = await self.choose_ensemble(replication.ensemble, replication.ack_quorum)
            tlog = TopicLog(
                topic,
                self.store,
                self.pool,
                owner=self.address,
                owner_epoch=self.epoch,
                ensemble=ensemble,
                choose_ensemble=self.choose_ensemble,
                settings=LogSettings(
                    replication=replication,
                    ledger_max_bytes=self.config.ledger_max_bytes,
                    cache_bytes=self.config.cache_bytes,
                ),
                clock=self.clock,
            )
            await tlog.open()
        except HedwigError as exc:
            log.warning("taking over topic %r failed: %s", topic, exc)
            with contextlib.suppress(HedwigError):
                await self.store.ownership.delete_owner_info(topic, version)
            if isinstance(exc, BadVersionError):
                raise status.ServiceUnavailableError(
                    f"topic {topic!r} was taken over concurrently; retry"
                ) from None
            raise status.ServiceUnavailableError(
                f"cannot recover topic {topic!r} now: {exc}"
            ) from None
        stats_hook = self._stats_hook
        owned = OwnedTopic(
            topic,
            tlog,
            self.store,
            config,
            clock=self.clock,
            hub_settings=self.config,
            on_lost=lambda name, reason: self._lose(name, reason),
            stats=(lambda d, n, b: stats_hook(topic, d, n, b)) if stats_hook else None,
        )
        try:
            # Learn the publishers' last sequences from the end of the log, so a publish
            # retried through this change of owner is still recognised as a duplicate.
            recent = await tlog.read(max(1, tlog.last_seq - DEDUP_WINDOW), DEDUP_WINDOW, 8 << 20)
            owned.remember_publishers([c.batch for c in recent])
        except HedwigError as exc:
            log.info("topic %r: could not read back recent publishers: %s", topic, exc)
        if tlog.previous_end_ms and self._on_claimed is not None:
            self._on_claimed(max(0.0, (self.clock.wall_ms() - tlog.previous_end_ms) / 1000))
        self.topics[topic] = owned
        self._owner_versions[topic] = version
        self._watch(topic)
        log.info("claimed topic %r (log at %d)", topic, tlog.last_seq)
        self._on_change()
        return owned

    async def choose_ensemble(
        self, size: int, minimum: int, exclude: frozenset[str] = frozenset()
    ) -> list[str]:
        """Storage replicas for a new ledger: this hub first (its writes are local), then
        other alive hubs at random, never one in ``exclude`` (replicas that just failed).

        With fewer than ``size`` hubs alive the ensemble shrinks, down to ``minimum`` (the ack
        quorum): every acknowledged entry still lands on ack-quorum replicas, so durability
        holds while a hub is down; the ledger is reported under-replicated, and the next
        roll-over goes back to full size.
        """
        if size <= 1 and self.address not in exclude:
            return [self.address]
        hubs = [h.address for h in await self.store.hubs.list_hubs() if h.alive]
        others = [a for a in hubs if a != self.address and a not in exclude]
        self.rng.shuffle(others)
        mine = [] if self.address in exclude else [self.address]
        chosen = [*mine, *others][:size]
        if len(chosen) < minimum:
            raise status.ServiceUnavailableError(
                f"need at least {minimum} storage replicas, only {len(chosen)} hubs are usable"
            )
        return chosen

    # watching -----------------------------------------------------------------------------

    def _watch(self, topic: str) -> None:
        def fired() -> None:
            asyncio.get_running_loop().create_task(self._check_owner(topic))

        self.store.ownership.watch_owner(topic, fired)

    async def _check_owner(self, topic: str) -> None:
        owned = self.topics.get(topic)
        if owned is None or owned.state is not TopicState.OPEN:
            return
        try:
            got = await self.store.ownership.read_owner_info(topic)
        except MetadataError:
            # Disconnected: the session listener decides what happens.
            self._watch(topic)
            return
        if got is not None and got.value == HubInfo(self.address, self.epoch):
            self._watch(topic)
            return
        new_owner = got.value.address if got is not None else None
        self._lose(topic, "ownership record removed", new_owner)

    def _lose(self, topic: str, reason: str, new_owner: str | None = None) -> None:
        owned = self.topics.pop(topic, None)
        self._owner_versions.pop(topic, None)
        if owned is None:
            return
        self.stats.losses += 1
        log.warning("lost topic %r: %s", topic, reason)
        owned.lose(reason, new_owner)
        if self._on_lost is not None:
            self._on_lost(reason)
        self._on_change()

    # releasing ----------------------------------------------------------------------------

    async def release(self, topic: str, reason: str, new_owner: str | None = None) -> bool:
        """Hand the topic over gracefully; True if we owned it."""
        owned = self.topics.get(topic)
        if owned is None:
            return False
        await owned.release(reason, new_owner)
        self.topics.pop(topic, None)
        version = self._owner_versions.pop(topic, None)
        if version is not None:
            try:
                await self.store.ownership.delete_owner_info(topic, version)
            except HedwigError as exc:
                log.info("releasing %r: owner record already gone (%s)", topic, exc)
        self.stats.releases += 1
        self._on_change()
        return True

    async def release_all(self, reason: str) -> None:
        await asyncio.gather(
            *(self.release(t, reason) for t in list(self.topics)), return_exceptions=True
        )

    async def collect_garbage(self) -> None:
        for owned in list(self.topics.values()):
            if owned.state is not TopicState.OPEN:
                continue
            try:
                await owned.flush_marks()
                keep = await owned.keep_from_seq()
                dropped = await owned.log.collect(
                    keep,
                    retention_ms=owned.config.retention_ms,
                    retention_bytes=owned.config.retention_bytes,
                )
                if dropped:
                    log.info("topic %r: collected ledgers %s", owned.name, dropped)
            except HedwigError as exc:
                log.info("topic %r: garbage collection skipped: %s", owned.name, exc)
