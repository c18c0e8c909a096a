"""A hub's namespace policies, kept current, and the topic count quota checked before a claim
that may create a topic.

Policies (``NamespaceWatcher``): read at start with one watch over them all (as the ACL
entries are, ``hedwig.hub.front.acl_watch``), read again when it fires, when a new session
begins, and every ``POLL_S`` whatever happens; a failed read keeps the policies the hub has
and is tried again shortly. A change reaches every hub within a round trip or two of the store,
and applies to each topic claimed after it (``TakeOver.topic_config`` reads ``policy_of``); a
topic served already keeps the settings it was opened with until it moves or is unloaded.

Creation (``admit``), for a topic of a namespace other than ``public/default`` (lanes
excepted: a lane belongs to its topic), before a claim that may create it:

- counted (``NamespaceManager.count_topic``: its marker and the count in one transaction, so
  hubs creating topics of one namespace at once stop exactly at ``max_topics``); a topic counted
  already costs a read and is admitted;
- refused with ``QuotaExceededError`` at the limit, unless it exists already (one made before
  counting began, or before the limit was lowered, is still served);
- refused with ``NoSuchTopicError`` when the namespace's ``auto_create`` is false and it does not
  exist (made first by an administrator's request: ``hedwig namespaces`` then lists it).

Subscriptions (``create_subscription``): a topic's owner makes them within its namespace's
``max_subscriptions``, counted from the store's records of them, one at a time per topic while
a limit is in force (the owner alone makes a topic's subscriptions, so the limit is exact). A
fan-out topic's delivery hubs make them the same way, each one at a time: creations at once on
several of its hubs may pass the limit by one per hub at most.

``forget`` uncounts a deleted topic. A hub that dies between counting a topic and creating it
leaves it counted, never the reverse; creating the same topic later does not count it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from hedwig.clock import Clock
from hedwig.errors import HedwigError, NoSuchTopicError, QuotaExceededError
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import SubscriptionData, Version
from hedwig.metadata.records.namespaces import NamespacePolicy, counted_namespace
from hedwig.protocol.names import lane_of, namespace_of

log = logging.getLogger(__name__)

POLL_S = 10.0
RETRY_S = 1.0


class NamespaceWatcher:
    def __init__(self, store: MetadataStore, *, clock: Clock, poll_s: float = POLL_S) -> None:
        self._store = store
        self._clock = clock
        self._poll_s = poll_s
        self.policies: dict[str, NamespacePolicy] = {}
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watching = False
        # Subscriptions being made, by topic: its lock, and how many wait on it or hold it.
        self._creating: dict[str, tuple[asyncio.Lock, int]] = {}
        store.session.add_listener(self._on_session)

    def policy_of(self, topic: str) -> NamespacePolicy | None:
        """The policy of ``topic``'s namespace, as last read; ``None`` if it has none."""
        if not self.policies:
            return None  # (a region without namespace policies: nothing to look up)
        return self.policies.get("/".join(namespace_of(lane_of(topic)[0])))

    async def start(self) -> None:
        """Load the policies, then keep them current."""
        await self._load()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def admit(self, topic: str) -> None:
        """Whether a claim may create ``topic`` (see the module docstring); raises if not."""
        name = counted_namespace(topic)
        if name is None:
            return
        policy = self.policies.get(name)
        limit = None if policy is None else policy.max_topics
        namespaces = self._store.namespaces
        closed = policy is not None and policy.auto_create is False
        if closed and not await self._store.topics.topic_exists(topic):
            raise NoSuchTopicError(
                f"topic {topic!r} does not exist, and namespace {name!r} does not create "
                "topics on first use (auto_create is off)"
            )
        try:
            await namespaces.count_topic(name, topic, limit)
        except QuotaExceededError:
            if not await self._store.topics.topic_exists(topic):
                raise

    async def create_subscription(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        """Make a subscription of ``topic`` (owned here) in the store, within its namespace's
        ``max_subscriptions``: counted from the store's records of the topic's subscriptions,
        one creation at a time per topic while a limit is in force, so a topic whose
        subscriptions only this hub makes stops exactly at the limit.
        ``QuotaExceededError`` past it; ``SubscriptionExistsError`` as the store says."""
        create = self._store.subscriptions.create_subscription_data
        policy = self.policy_of(topic)
        limit = None if policy is None else policy.max_subscriptions
        if limit is None:
            return await create(topic, subscriber, data)
        lock, waiting = self._creating.get(topic, (asyncio.Lock(), 0))
        self._creating[topic] = (lock, waiting + 1)
        try:
            async with lock:
                held = await self._store.subscriptions.read_subscriptions(topic)
                if subscriber not in held and len(held) >= limit:
                    name = "/".join(namespace_of(lane_of(topic)[0]))
                    raise QuotaExceededError.of(
                        name,
                        "max_subscriptions",
                        limit,
                        f"topic {topic!r} holds {len(held)} subscriptions",
                    )
                return await create(topic, subscriber, data)
        finally:
            lock, waiting = self._creating[topic]
            if waiting > 1:
                self._creating[topic] = (lock, waiting - 1)
            else:
                del self._creating[topic]

    async def forget(self, topic: str) -> None:
        """``topic`` was deleted: uncounted."""
        name = counted_namespace(topic)
        if name is not None:
            await self._store.namespaces.uncount_topic(name, topic)

    def _fired(self) -> None:
        self._watching = False
        self._changed.set()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._watching = False
            self._changed.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._changed.wait(), self._poll_s)
            self._changed.clear()
            try:
                await self._load()
            except HedwigError as exc:
                log.warning("reading the namespaces' policies failed (keeping them): %s", exc)
                await self._clock.sleep(RETRY_S)
                self._changed.set()

    async def _load(self) -> None:
        # Armed before the read, as ``AclWatcher._load`` explains.
        arm = not self._watching
        self._watching = True
        try:
            got = await self._store.namespaces.list_namespaces(watch=self._fired if arm else None)
        except BaseException:
            if arm:
                self._watching = False
            raise
        self.policies = {name: v.value for name, v in got.items()}
