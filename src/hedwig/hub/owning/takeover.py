"""Taking a claimed topic over: its settings, its log's recovery, the read-back of its end.

A hub that has written a topic's owner record (``hedwig.hub.owning.ownership``) takes the topic
over here before serving it:

1. Its configuration: its own over its namespace's policy (``namespaces``) over the region's
   defaults over this hub's (those two merged once for each set of region defaults, not for
   every claim), and the settings made of it, one shared object for every topic configured
   alike (nearly all are).
2. The ensemble its next ledger goes to (placement's choice of replicas), and its log: the
   previous owner's last ledger recovered (fenced, its end found, closed), a new one opened.
   A claim that creates the topic brings its first ledger along (``first_log``).
3. The end of its log read back (``DEDUP_WINDOW`` messages), so a publish retried through this
   change of owner is still recognised as a duplicate.

If any step fails the owner record is given up and the request answered "unavailable, retry":
a topic whose history could not be recovered is never served.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from hedwig.clock import Clock, Throttle
from hedwig.errors import (
    BadVersionError,
    HedwigError,
    LedgerGoneError,
    NotEnoughHubsError,
    ServiceUnavailableError,
)
from hedwig.hub.owning.choices import HubChoices
from hedwig.hub.owning.namespaces import NamespaceWatcher
from hedwig.hub.owning.topic import OwnedTopic, TopicContext
from hedwig.hub.reporting.events import HubEvents, LossKind
from hedwig.hub.serving.dead_letters import DeadLetterSink
from hedwig.ledger.handle import Fragments
from hedwig.ledger.lac_notices import LacNotices
from hedwig.ledger.log_context import LogContext, LogSettings
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.topic_log import TopicLog
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import (
    HubInfo,
    LedgerMetadata,
    TopicClaim,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.records.namespaces import effective_config
from hedwig.settings import HubConfig, TopicSettings

log = logging.getLogger(__name__)

# Messages at the end of a topic's log read back on take-over to rebuild duplicate detection.
DEDUP_WINDOW = 5000
# Distinct topic configurations whose settings are kept to share (more: start afresh).
MAX_SHARED_CONFIGS = 1000
# A failure that repeats for one topic (every client retry) is a warning at most this often.
WARN_EVERY_S = 10.0


@dataclass(frozen=True)
class FirstLog:
    """A new topic's log as a claim starts it: its settings (``settings_for``), the ensemble
    chosen, its first ledger (id given by the store), and once the claim made them, that
    ledger's metadata and the persistence record's version (``TopicClaim.log``)."""

    settings: tuple[TopicConfig, TopicSettings, LogSettings]
    ensemble: Sequence[str]
    ledger: LedgerMetadata
    started: tuple[Versioned[LedgerMetadata], Version] | None = None


def _no_suspects(ledger_id: int, fragments: Fragments) -> None:
    return None


class TakeOver:
    def __init__(
        self,
        *,
        config: HubConfig,
        store: MetadataStore,
        replicas: Replicas,
        clock: Clock,
        events: HubEvents,
        choices: HubChoices,
        me: Callable[[], HubInfo],
        on_lost: Callable[[str, LossKind, str], None],
        on_subscriptions: Callable[[OwnedTopic], None],
        on_rolled_over: Callable[[str], None],
        namespaces: NamespaceWatcher,
        dead_letters: DeadLetterSink | None = None,
    ) -> None:
        self.config = config
        self._policy_of = namespaces.policy_of
        self.store = store
        self.replicas = replicas
        self.clock = clock
        self.events = events
        self.choices = choices
        self._me = me  # this hub's address and epoch, as they are now
        self.lac_notices = LacNotices(replicas, clock=clock)
        self._lac_idle = self.lac_notices.idle  # one bound method for every topic's log
        self._warn_throttle = Throttle(WARN_EVERY_S, clock)
        self.defaults = TopicConfig()
        # ``_defaults_merged``: what it made, and of which ``defaults``.
        self._merged_of: TopicConfig | None = None
        self._merged = self.defaults
        # Told the ledgers a topic's log closed or recovered that may be under-replicated
        # (the hub's auditor sets it); one callable shared by every log.
        self.suspect: Callable[[int, Fragments], None] = _no_suspects
        # Callbacks and settings every owned topic holds, made once and shared (a bound
        # method is 64 bytes, a topic's merged configuration and settings about 400).
        self._context = TopicContext(
            store,
            clock,
            events,
            on_lost,
            on_subscriptions,
            namespaces.create_subscription,
            dead_letters,
        )
        self._rolled_over = on_rolled_over
        self._ensemble_cb = choices.ensemble
        self._suspect_one: Callable[[int, Fragments], None] = self._suspect_cb
        self._shared: dict[TopicConfig, tuple[TopicConfig, TopicSettings, LogSettings]] = {}
        self._log_ctx: LogContext | None = None  # ``_log_context``

    def _suspect_cb(self, ledger_id: int, fragments: Fragments) -> None:
        self.suspect(ledger_id, fragments)

    def _log_context(self) -> LogContext:
        """What every topic log of this hub shares, made again when this hub's address or
        epoch changes (they name the owner of new ledgers)."""
        me = self._me()
        ctx = self._log_ctx
        if ctx is None or ctx.epoch != me.epoch or ctx.owner != me.address:
            ctx = self._log_ctx = LogContext(
                self.store,
                self.replicas,
                me.address,
                me.epoch,
                self.clock,
                choose_ensemble=self._ensemble_cb,
                on_rolled_over=self._rolled_over
                if self.config.balance.release_on_rollover
                else None,
                on_suspect=self._suspect_one,
                on_idle=self._lac_idle,
            )
        return ctx

    async def first_log(self, topic: str) -> FirstLog | None:
        """What a new topic's log starts with, as its take-over would choose it (``None``
        if that fails now: the claim goes alone, and its take-over says why)."""
        try:
            shared, ensemble = await self._log_plan(topic, fresh=True)
        except HedwigError:
            return None
        ledger = self._log_context().new_ledger_metadata(topic, shared[2], ensemble)
        return FirstLog(shared, ensemble, ledger)

    async def _log_plan(
        self, topic: str, *, fresh: bool = False, known: Versioned[TopicConfig] | None = None
    ) -> tuple[tuple[TopicConfig, TopicSettings, LogSettings], Sequence[str]]:
        """A topic's settings (``settings_for``) and the ensemble its next ledger goes to:
        what a take-over, or a claim that starts the topic's log, works out first."""
        shared = self.settings_for(await self.topic_config(topic, fresh=fresh, known=known))
        replication = shared[2].replication
        return shared, await self.choices.ensemble(replication.ensemble, replication.ack_quorum)

    async def topic_config(
        self, topic: str, *, fresh: bool = False, known: Versioned[TopicConfig] | None = None
    ) -> TopicConfig:
        """The topic's configuration over its namespace's policy over the region's defaults
        over this hub's (``fresh``: a topic just created, which has none of its own;
        ``known``: its own as read with the claim)."""
        got = (
            known
            if known is not None or fresh
            else await self.store.topics.read_topic_config(topic)
        )
        own = got.value if got else None
        return effective_config(own, self._policy_of(topic), self._defaults_merged())

    def _defaults_merged(self) -> TopicConfig:
        """The region's defaults over this hub's: merged once for each the region sets, not
        for every claim (most topics have no configuration of their own, and take this as
        it is)."""
        if self._merged_of is not self.defaults:
            c = self.config
            self._merged = self.defaults.merged(
                TopicConfig(
                    replication=c.storage.replication_config,
                    retention_ms=c.retention.default_retention_ms,
                    retention_bytes=c.retention.default_retention_bytes,
                    max_message_size=c.delivery.max_message_size,
                    inactive_topic_expiry_ms=c.retention.default_inactive_topic_expiry_ms,
                    subscription_expiry_ms=c.retention.default_subscription_expiry_ms,
                )
            )
            self._merged_of = self.defaults
        return self._merged

    async def open(
        self, topic: str, claim: TopicClaim, first: FirstLog | None = None
    ) -> tuple[OwnedTopic, float]:
        """Take the topic over under the owner record ``claim`` wrote: recover its log (from
        the ledger list, if the claim read it) and read back its tail; on failure the record
        is given up. ``claim.config``: its configuration, if the claim read it; ``first``: the
        new topic's first ledger, made with the claim. The topic, and when its log was open
        (the rest was reading back)."""
        version, fresh, known, ranges = claim.version, claim.new, claim.config, claim.ranges
        assert version is not None
        try:
            if first is not None:
                (config, settings, log_settings), ensemble = first.settings, first.ensemble
            else:
                (config, settings, log_settings), ensemble = await self._log_plan(
                    topic, fresh=fresh, known=known
                )
            tlog = TopicLog(topic, self._log_context(), ensemble=ensemble, settings=log_settings)
            await tlog.open(fresh=fresh, started=first.started if first else None, known=ranges)
            opened = self.clock.monotonic()
        except HedwigError as exc:
            level = logging.WARNING if self._warn_throttle.allow(topic) else logging.DEBUG
            log.log(level, "taking over topic %r failed: %s", topic, exc)
            with contextlib.suppress(HedwigError):
                await self.store.ownership.delete_owner_info(topic, version)
            if isinstance(exc, NotEnoughHubsError):
                raise
            if isinstance(exc, BadVersionError):
                raise ServiceUnavailableError(
                    f"topic {topic!r} was taken over concurrently"
                ) from None
            raise ServiceUnavailableError(f"cannot recover topic {topic!r} now: {exc}") from None
        owned = OwnedTopic(topic, tlog, config, settings=settings, context=self._context)
        try:
            # Learn the publishers' last sequences from the end of the log, so a publish
            # retried through this change of owner is still recognised as a duplicate.
            # To the very end: the last batches are the ones most likely re-sent, since
            # their acknowledgements are what the previous owner could not send.
            start = max(1, tlog.last_seq - DEDUP_WINDOW + 1)
            while start <= tlog.last_seq:
                try:
                    recent = await tlog.read(start, DEDUP_WINDOW, 8 << 20)
                except LedgerGoneError as exc:
                    # Deleted with its messages: a deletion of this topic cut short by a crash
                    # (ledgers first, records last). Nothing is left there to recognise a
                    # duplicate of; refusing the claim would leave the topic impossible to
                    # delete (the deletion's retry claims it too) or to use.
                    log.warning("taking over topic %r: %s; not read back", topic, exc)
                    break
                if not recent:
                    break
                owned.remember_publishers(recent)
                start = recent[-1].last_seq + 1
        except HedwigError as exc:
            # Serving without them would store again every batch whose acknowledgement the
            # previous owner could not send (its clients retry them here): duplicates. Give
            # the topic up; the next claim tries again.
            level = logging.WARNING if self._warn_throttle.allow(topic) else logging.DEBUG
            log.log(level, "taking over topic %r failed: reading back its tail: %s", topic, exc)
            with contextlib.suppress(HedwigError):
                await tlog.abandon()
            with contextlib.suppress(HedwigError):
                await self.store.ownership.delete_owner_info(topic, version)
            raise ServiceUnavailableError(
                f"cannot read back the end of topic {topic!r} now: {exc}"
            ) from None
        return owned, opened

    def settings_for(self, config: TopicConfig) -> tuple[TopicConfig, TopicSettings, LogSettings]:
        """The topic's configuration, its settings and its log's, one shared object each for
        every topic configured alike (nearly all are)."""
        shared = self._shared.get(config)
        if shared is None:
            if len(self._shared) >= MAX_SHARED_CONFIGS:
                self._shared.clear()
            shared = (
                config,
                self.config.topic_settings(config),
                LogSettings(
                    replication=config.replication or self.config.storage.replication_config,
                    ledger_max_bytes=self.config.storage.ledger_max_bytes,
                    cache_bytes=self.config.storage.cache_bytes,
                ),
            )
            self._shared[config] = shared
        return shared
