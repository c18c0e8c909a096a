"""An in-process metadata store: the second implementation of the managers.

It exists for two reasons: unit tests of hub logic that should not wait for ZooKeeper, and as
proof that the manager interfaces do not lean on ZooKeeper's tree. It is a key/value store
with per-key versions and sessions whose records vanish when the session is expired, and it
supports partial subscription updates (preferences and state are separate fields). Several
``MemoryMetadataStore`` objects sharing one ``MemoryBackend`` behave like hubs sharing one
store; ``expire`` plays a session expiry.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    MetadataError,
    MetadataUnavailableError,
    NoLedgerMetadataError,
    NoSuchSubscriptionError,
    NoTopicOwnerInfoError,
    NoTopicPersistenceInfoError,
    SubscriptionExistsError,
)
from hedwig.metadata.acls import AclEntry
from hedwig.metadata.managers import SessionState
from hedwig.metadata.plans import TopicPlan
from hedwig.metadata.records import (
    ANY_VERSION,
    NEW_VERSION,
    HubInfo,
    HubLoad,
    HubStatus,
    LedgerMetadata,
    LedgerRanges,
    SubscriptionData,
    TopicClaim,
    TopicConfig,
    Version,
    Versioned,
)
from hedwig.metadata.topic_call import TopicCall
from hedwig.metadata.topic_logs import holds_ledger, next_ranges, start_in_steps
from hedwig.protocol.names import encode_name


@dataclass
class _Entry:
    value: Any
    version: int = 0
    session: int | None = None  # set for records that die with their session
    czxid: int = 0
    # When it was created and last written, in the order of writes (ZooKeeper's zxids).
    made: int = 0
    mzxid: int = 0


@dataclass
class MemoryBackend:
    """The shared state; one per simulated cluster."""

    data: dict[tuple[str, ...], _Entry] = field(default_factory=dict)
    watches: dict[tuple[str, ...], list[Callable[[], None]]] = field(default_factory=dict)
    counter: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    # The order of writes, as ZooKeeper's zxids (``mzxid``); its own count, so ledger ids and
    # session ids do not depend on how many writes were made.
    writes: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    sessions: dict[int, MemoryMetadataStore] = field(default_factory=dict)

    def fire(self, key: tuple[str, ...]) -> None:
        for cb in self.watches.pop(key, []):
            asyncio.get_running_loop().call_soon(cb)

    def expire(self, session: int) -> None:
        """End a session: its records go; its store learns it at once if connected, else when
        it reconnects (as a ZooKeeper client cut off from the server does)."""
        for key in [k for k, e in self.data.items() if e.session == session]:
            del self.data[key]
            self.fire(key)
        store = self.sessions.pop(session, None)
        if store is not None and store.state is SessionState.CONNECTED:
            store._lost()


class MemoryMetadataStore:
    def __init__(self, backend: MemoryBackend, region: str) -> None:
        self.region = region
        self._b = backend
        self._session_id = 0
        self._state = SessionState.SUSPENDED
        self._listeners: list[Callable[[SessionState], None]] = []
        self.ownership = self
        self.persistence = self
        self.subscriptions = self
        self.ledgers = self
        self.topics = self
        self.hubs = self
        self.acls = self
        self.plans = self
        self.session = self

    # session ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._session_id = next(self._b.counter)
        self._b.sessions[self._session_id] = self
        self._set_state(SessionState.CONNECTED)

    async def close(self) -> None:
        self._b.expire(self._session_id)

    async def __aenter__(self) -> MemoryMetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def expire(self) -> None:
        """Expire this store's session, as ZooKeeper would after a long partition."""
        self._b.expire(self._session_id)

    def disconnect(self) -> None:
        """Lose the connection but keep the session, as a ZooKeeper client does when its
        server goes away briefly: operations fail until ``reconnect``."""
        if self._state is SessionState.CONNECTED:
            self._set_state(SessionState.SUSPENDED)

    def reconnect(self) -> None:
        if self._state is not SessionState.SUSPENDED:
            return
        if self._session_id in self._b.sessions:
            self._set_state(SessionState.CONNECTED)
        else:
            self._lost()  # the session ended while we were away

    def _lost(self) -> None:
        self._set_state(SessionState.LOST)

    def _set_state(self, state: SessionState) -> None:
        self._state = state
        for listener in list(self._listeners):
            listener(state)

    @property
    def state(self) -> SessionState:
        return self._state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._listeners.append(listener)

    # helpers ------------------------------------------------------------------------------

    def _check(self) -> None:
        if self._state is not SessionState.CONNECTED:
            raise MetadataUnavailableError("memory store session is not connected")

    def _k(self, *parts: str) -> tuple[str, ...]:
        return (self.region, *parts)

    def _get(self, key: tuple[str, ...]) -> _Entry | None:
        self._check()
        return self._b.data.get(key)

    def _create(self, key: tuple[str, ...], value: Any, *, ephemeral: bool = False) -> _Entry:
        self._check()
        if key in self._b.data:
            raise BadVersionError.at("/".join(key), NEW_VERSION)
        session = self._session_id if ephemeral else None
        made = next(self._b.writes)
        entry = _Entry(value, 0, session, next(self._b.counter), made, made)
        self._b.data[key] = entry
        self._b.fire(key)
        return entry

    def _set(self, key: tuple[str, ...], value: Any, version: Version, missing: Exception) -> int:
        entry = self._get(key)
        if entry is None:
            raise missing
        if version != ANY_VERSION and entry.version != version:
            raise BadVersionError.at("/".join(key), version)
        entry.value = value
        entry.version += 1
        entry.mzxid = next(self._b.writes)
        self._b.fire(key)
        return entry.version

    def _delete(self, key: tuple[str, ...], version: Version, missing: Exception) -> None:
        entry = self._get(key)
        if entry is None:
            raise missing
        if version != ANY_VERSION and entry.version != version:
            raise BadVersionError.at("/".join(key), version)
        del self._b.data[key]
        self._b.fire(key)

    # TopicOwnershipManager ------------------------------------------------------------------

    async def read_owner_info(self, topic: str) -> Versioned[HubInfo] | None:
        e = self._get(self._k("owner", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def claim_topic(
        self, topic: str, owner: HubInfo, first: LedgerMetadata | None = None
    ) -> TopicClaim:
        held = self._get(self._k("owner", topic))  # read in the claim, as etcd's transaction
        if held is not None:
            return TopicClaim(None, owner=Versioned(held.value, Version(held.version)))
        if (config := self._get(self._k("topic", topic))) is not None:
            version = await self.write_owner_info(topic, owner, NEW_VERSION)
            ranges = await self.read_topic_persistence_info(topic)
            return TopicClaim(
                version,
                config=Versioned(config.value, Version(config.version)),
                ranges=ranges or Versioned(LedgerRanges(), NEW_VERSION),
            )
        self._create(self._k("topic", topic), TopicConfig())
        made = self._create(self._k("owner", topic), owner, ephemeral=True)
        log = None
        if first is not None and self._get(self._k("ledgers", topic)) is None:
            log = await start_in_steps(self, self, topic, first)
        return TopicClaim(Version(made.version), new=True, log=log)

    async def write_owner_info(self, topic: str, owner: HubInfo, version: Version) -> Version:
        key = self._k("owner", topic)
        if version == NEW_VERSION:
            if self._get(self._k("topic", topic)) is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            return Version(self._create(key, owner, ephemeral=True).version)
        return Version(self._set(key, owner, version, NoTopicOwnerInfoError(topic)))

    async def delete_owner_info(self, topic: str, version: Version) -> None:
        self._delete(self._k("owner", topic), version, NoTopicOwnerInfoError(topic))

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        call = TopicCall(callback, topic)
        key = self._k("owner", topic)
        e = self._b.data.get(key)
        if e is not None and version is not None and e.version != version:
            asyncio.get_running_loop().call_soon(call)  # changed since the caller saw it
            return
        if key not in self._b.data:
            asyncio.get_running_loop().call_soon(call)
            return
        self._b.watches.setdefault(key, []).append(call)

    # TopicPersistenceManager ----------------------------------------------------------------

    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        e = self._get(self._k("ledgers", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        key = self._k("ledgers", topic)
        if version == NEW_VERSION:
            return Version(self._create(key, ranges).version)
        return Version(self._set(key, ranges, version, NoTopicPersistenceInfoError(topic)))

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        self._delete(self._k("ledgers", topic), version, NoTopicPersistenceInfoError(topic))

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        return await start_in_steps(self, self, topic, first)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        # Every version checked before anything is written: all or nothing, as the stores'.
        key = self._k("ledgers", topic)
        expected = [(key, ranges.version)]
        expected += [(self._k("ledger", str(c.value.ledger_id)), c.version) for c in closed]
        for k, version in expected:
            entry = self._get(k)
            if entry is None or entry.version != version:
                raise BadVersionError.at("/".join(k), version)
        for c in closed:
            await self.write_ledger(c.value, c.version)
        created = await self.create_ledger(following)
        record = next_ranges(ranges.value, created.value.ledger_id)
        version = await self.write_topic_persistence_info(topic, record, ranges.version)
        return created, Versioned(record, version)

    # SubscriptionDataManager ----------------------------------------------------------------

    def is_partial_update_supported(self) -> bool:
        return True

    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        key = self._k("sub", topic, subscriber)
        if self._get(key) is not None:
            raise SubscriptionExistsError(f"{topic}/{subscriber}")
        return Version(self._create(key, data).version)

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        key = self._k("sub", topic, subscriber)
        e = self._get(key)
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        if e is None:
            raise missing
        return Version(self._set(key, data.merged_into(e.value), version, missing))

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        return Version(self._set(self._k("sub", topic, subscriber), data, version, missing))

    async def delete_subscription_data(self, topic: str, subscriber: str, version: Version) -> None:
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        self._delete(self._k("sub", topic, subscriber), version, missing)

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None:
        e = self._get(self._k("sub", topic, subscriber))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]:
        self._check()
        prefix = self._k("sub", topic)
        return {
            k[-1]: Versioned(e.value, Version(e.version))
            for k, e in self._b.data.items()
            if k[:-1] == prefix
        }

    # LedgerMetadataManager ------------------------------------------------------------------

    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        self._check()
        lid = next(self._b.counter)
        md = replace(metadata, ledger_id=lid)
        self._create(self._k("ledger", str(lid)), md)
        return Versioned(md, Version(0))

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        e = self._get(self._k("ledger", str(ledger_id)))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        missing = NoLedgerMetadataError(str(metadata.ledger_id))
        return Version(
            self._set(self._k("ledger", str(metadata.ledger_id)), metadata, version, missing)
        )

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        missing = NoLedgerMetadataError(str(ledger_id))
        self._delete(self._k("ledger", str(ledger_id)), version, missing)

    async def list_ledgers(self) -> list[int]:
        self._check()
        return sorted(int(k[2]) for k in self._b.data if k[:2] == (self.region, "ledger"))

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        ledger = self._get(self._k("ledger", str(ledger_id)))
        record = self._get(self._k("ledgers", topic))
        if ledger is None or record is None or record.mzxid <= ledger.made:
            return False
        return not holds_ledger(record.value, ledger_id)

    # TopicCatalog ---------------------------------------------------------------------------

    async def ensure_topic(self, topic: str) -> bool:
        if self._get(self._k("topic", topic)) is None:
            self._create(self._k("topic", topic), TopicConfig())
            return True
        return False

    async def topic_exists(self, topic: str) -> bool:
        return self._get(self._k("topic", topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        e = self._get(self._k("topic", topic))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        key = self._k("topic", topic)
        if version == NEW_VERSION:
            return Version(self._create(key, config).version)
        missing = MetadataError(f"topic {topic!r} does not exist")
        return Version(self._set(key, config, version, missing))

    async def list_topics(self) -> list[str]:
        self._check()
        return sorted(k[2] for k in self._b.data if k[:2] == (self.region, "topic"))

    async def delete_topic(self, topic: str) -> None:
        self._check()
        for key in list(self._b.data):
            if (
                key[0] == self.region
                and len(key) >= 3
                and key[1] not in ("ledger", "acl")
                and key[2] == topic
            ):
                del self._b.data[key]
                self._b.fire(key)
                if key[1] == "plan":
                    self._b.fire(self._k(self._PLANNED_CHANGED))

    async def read_region_defaults(self) -> TopicConfig:
        e = self._get(self._k("defaults"))
        return e.value if e is not None else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        key = self._k("defaults")
        if self._get(key) is None:
            self._create(key, config)
        else:
            self._set(key, config, ANY_VERSION, MetadataError("defaults"))

    # HubRegistry ----------------------------------------------------------------------------

    async def register_hub(self, address: str, load: HubLoad) -> int:
        self._check()
        self._b.data.setdefault(self._k("host", address), _Entry(None))
        key = self._k("alive", address)
        self._b.data.pop(key, None)
        return self._create(key, load, ephemeral=True).czxid

    async def update_load(self, address: str, load: HubLoad) -> None:
        self._set(self._k("alive", address), load, ANY_VERSION, MetadataError("not registered"))

    async def unregister_hub(self, address: str) -> None:
        self._check()
        self._b.data.pop(self._k("alive", address), None)

    async def alive_epoch(self, address: str) -> int | None:
        self._check()
        alive = self._b.data.get(self._k("alive", address))
        return None if alive is None else alive.czxid

    async def list_hubs(self) -> list[HubStatus]:
        self._check()
        out = []
        for key in sorted(k for k in self._b.data if k[:2] == (self.region, "host")):
            alive = self._b.data.get(self._k("alive", key[2]))
            out.append(
                HubStatus(key[2], False)
                if alive is None
                else HubStatus(key[2], True, alive.czxid, alive.value)
            )
        return out

    # AclManager -------------------------------------------------------------------------------

    _ACLS_CHANGED = "acls-changed"

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        self._check()
        out = {
            key[2]: Versioned(e.value, Version(e.version))
            for key, e in self._b.data.items()
            if key[:2] == (self.region, "acl")
        }
        if watch is not None:
            self._b.watches.setdefault(self._k(self._ACLS_CHANGED), []).append(watch)
        return out

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        e = self._get(self._k("acl", name))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        encode_name(name)  # validates, as the ZooKeeper store does
        key = self._k("acl", name)
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            got = Version(self._create(key, entry).version)
        else:
            got = Version(self._set(key, entry, version, MetadataError(f"no ACL entry {name!r}")))
        self._b.fire(self._k(self._ACLS_CHANGED))
        return got

    async def delete_acl(self, name: str, version: Version) -> None:
        self._delete(self._k("acl", name), version, MetadataError(f"no ACL entry {name!r}"))
        self._b.fire(self._k(self._ACLS_CHANGED))

    # TopicPlanManager -------------------------------------------------------------------------

    _PLANNED_CHANGED = "planned-changed"

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        self._check()
        if watch is not None:
            self._b.watches.setdefault(self._k(self._PLANNED_CHANGED), []).append(watch)
        return frozenset(
            k[2] for k in self._b.data if k[0] == self.region and k[1] == "plan" and len(k) == 3
        )

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        key = self._k("plan", topic)
        e = self._get(key)
        if watch is not None:
            # Keyed by the record: creating, writing or deleting it (or the topic) fires it.
            self._b.watches.setdefault(key, []).append(watch)
        return None if e is None else Versioned(e.value, Version(e.version))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        key = self._k("plan", topic)
        if self._get(self._k("topic", topic)) is None:
            raise MetadataError(f"topic {topic!r} does not exist")
        if version == NEW_VERSION or (version == ANY_VERSION and self._get(key) is None):
            created = Version(self._create(key, plan).version)
            self._b.fire(self._k(self._PLANNED_CHANGED))
            return created
        return Version(self._set(key, plan, version, MetadataError(f"topic {topic!r} has no plan")))

    async def delete_plan(self, topic: str, version: Version) -> None:
        self._delete(self._k("plan", topic), version, MetadataError(f"topic {topic!r} has no plan"))
        self._b.fire(self._k(self._PLANNED_CHANGED))
