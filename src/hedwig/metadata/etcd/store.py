"""The metadata managers on etcd v3: versions are mod revisions, ownership is lease-bound.

Keys (``docs/zookeeper-layout.md``, "etcd"), under ``/hedwig/<region>`` or the URL's prefix,
names encoded as in ZooKeeper (``a/b`` is ``a%2Fb``, so a name never reaches into another key):

    topics/<T>             the topic exists; its configuration (JSON, empty for defaults)
    owners/<T>             owner record, attached to one of the owner's leases
    persistence/<T>        ledger ranges
    subscribers/<T>/<S>    subscription (preferences and state, whole)
    hosts/<H>              a hub that joined the region (persistent)
    alive/<H>              its load report, attached to its lease
    ledgers/L<id>          ledger metadata; ids handed out in blocks from ``ledger-ids``
    ledger-ids             the first ledger id no hub has taken yet
    acls/<name>            access control entries
    defaults               region defaults

Each family has a prefix of its own, so listing topics reads topic keys only (page by page),
and a topic's subscriptions are one range. Every conditional write is one transaction that
compares the key's mod revision (``Version``) or its absence, and reads the key back when the
comparison fails, so the caller learns whether it was missing or changed.

Subscriptions are stored whole, as on ZooKeeper (``is_partial_update_supported`` False): etcd
values are opaque, a partial update would be a read-modify-write anyway, and the owner holds the
whole record when it writes a consume mark.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    MetadataError,
    NoLedgerMetadataError,
    NoSuchSubscriptionError,
    NoTopicOwnerInfoError,
    NoTopicPersistenceInfoError,
    SubscriptionExistsError,
)
from hedwig.metadata.acls import AclEntry
from hedwig.metadata.etcd.client import CredentialsSource, EtcdClient, Item, PrefixWatch, delete
from hedwig.metadata.etcd.keys import Keys, create_key, delete_key, set_key
from hedwig.metadata.etcd.wire import exists, get, missing, modified_at, put
from hedwig.metadata.id_blocks import IdBlocks
from hedwig.metadata.layout import ROOT
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
from hedwig.metadata.topic_logs import first_ranges, holds_ledger, next_ranges


def _config_of(got: Item | None) -> Versioned[TopicConfig] | None:
    """A topic's key holds its configuration (empty: the region's defaults)."""
    return None if got is None else Versioned(TopicConfig.from_json(got.value), Version(got.mod))


def _held(got: Item) -> TopicClaim:
    """A claim refused: the owner record in the way."""
    return TopicClaim(None, owner=Versioned(HubInfo.from_json(got.value), Version(got.mod)))


class EtcdOwnership:
    def __init__(self, etcd: EtcdClient, keys: Keys, ledgers: EtcdLedgers) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ledgers = ledgers  # ids of the first ledgers claims make
        self._tasks: set[asyncio.Task[None]] = set()
        # Every owner watch of this process, on one watch of the owners' prefix.
        self.watches = PrefixWatch(etcd, keys.family("owners"), etcd.watch_from)
        # Whether the last topic claimed existed already (``claim_topic``).
        self._claimed_existing = False

    async def read_owner_info(self, topic: str) -> Versioned[HubInfo] | None:
        got = await self._etcd.get(self._keys.owner(topic))
        return None if got is None else Versioned(HubInfo.from_json(got.value), Version(got.mod))

    async def write_owner_info(self, topic: str, owner: HubInfo, version: Version) -> Version:
        """A claim is lease-bound: the record goes when the claimer's lease expires."""
        key, topic_key = self._keys.owner(topic), self._keys.topic(topic)
        lease = await self._etcd.owner_lease(key)
        if version == NEW_VERSION:
            res = await self._etcd.txn(
                [exists(topic_key), missing(key)],
                [put(key, owner.to_json(), lease)],
                [get(topic_key)],
            )
            if res.succeeded:
                return Version(res.revision)
            if res.reads[0] is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            raise BadVersionError.at(key.decode(), version)
        try:
            return await set_key(self._etcd, key, owner.to_json(), version, lease)
        except LookupError as exc:
            raise NoTopicOwnerInfoError(topic) from exc

    async def claim_topic(
        self, topic: str, owner: HubInfo, first: LedgerMetadata | None = None
    ) -> TopicClaim:
        """One transaction makes a new topic with its record (and ``first`` with the
        persistence record naming it, as ``EtcdPersistence.start_topic_log``), or reads whose
        record is in the way; an existing topic with none takes a second, the record's
        compare-and-set (an etcd transaction nested in another's branch would say it in one,
        but would go to etcd alone instead of with the others waiting: ``TxnBatcher``).

        Claims come in waves of one kind (first publishes create their topics; a failover
        takes existing ones over): after a claim that found its topic there, the second
        transaction is tried first, and a take-over's claim is one. A wrong guess costs the
        transaction it would have saved."""
        key, topic_key = self._keys.owner(topic), self._keys.topic(topic)
        lease = await self._etcd.owner_lease(key)
        record = owner.to_json()
        if self._claimed_existing:
            claim = await self._claim_existing(topic, record, lease)
            if claim is not None:
                return claim
        guards, writes = (
            [missing(topic_key), missing(key)],
            [put(topic_key, b""), put(key, record, lease)],
        )
        md = None
        if first is not None:
            md = replace(first, ledger_id=await self._ledgers.new_id())
            persistence, ledger_key = self._keys.persistence(topic), self._keys.ledger(md.ledger_id)
            guards += [missing(persistence), missing(ledger_key)]
            writes += [
                put(ledger_key, md.to_json()),
                put(persistence, first_ranges(md.ledger_id).to_json()),
            ]
        # On failure, who holds the topic; and with a first ledger, whether the topic exists
        # (if not, only the ledger's records were in the way). A claim without one is refused
        # far more often (another hub owns the topic) and needs only the first read.
        reads = [get(key), get(topic_key)] if first is not None else [get(key)]
        res = await self._etcd.txn(guards, writes, reads)
        if res.succeeded:  # (``_claimed_existing`` is false: see the ZooKeeper store's)
            at = Version(res.revision)
            log = None if md is None else (Versioned(md, at), at)
            return TopicClaim(at, new=True, log=log)
        if first is not None and res.reads[0] is None and res.reads[1] is None:
            # Only the first ledger's records were in the way (a persistence record left by a
            # deletion cut short, or an id given twice): the claim alone, its log in steps.
            return await self.claim_topic(topic, owner)
        if (held := res.reads[0]) is None:
            claim = await self._claim_existing(topic, record, lease)
            if claim is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            return claim
        self._claimed_existing = True
        return _held(held)

    async def _claim_existing(self, topic: str, record: bytes, lease: int) -> TopicClaim | None:
        """The owner record's compare-and-set on a topic that exists, with the topic's
        configuration and ledger list read as of it (the take-over's next two reads, each a
        request and an etcd range of its own otherwise); ``None``: no such topic."""
        key, topic_key = self._keys.owner(topic), self._keys.topic(topic)
        res = await self._etcd.txn(
            [exists(topic_key), missing(key)],
            [put(key, record, lease), get(topic_key), get(self._keys.persistence(topic))],
            [get(key)],
        )
        if res.succeeded:
            self._claimed_existing = True
            config, ranges = res.reads
            return TopicClaim(
                Version(res.revision),
                config=_config_of(config),
                ranges=(
                    Versioned(LedgerRanges(), NEW_VERSION)
                    if ranges is None
                    else Versioned(LedgerRanges.from_json(ranges.value), Version(ranges.mod))
                ),
            )
        if (held := res.reads[0]) is None:
            self._claimed_existing = False
            return None
        self._claimed_existing = True
        return _held(held)

    async def delete_owner_info(self, topic: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.owner(topic), version)
        except LookupError as exc:
            raise NoTopicOwnerInfoError(topic) from exc

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        call = TopicCall(callback, topic)
        if version is not None and self.watches.follows(int(version)):
            # The record the caller saw is no older than what the prefix watch has delivered
            # (a claim's own write): every later change of it is still to come on the stream,
            # so no read is needed to watch from the present. One store read fewer per claim.
            self.watches.add(self._keys.owner(topic), int(version), call)
            return
        task = asyncio.get_running_loop().create_task(self._watch(topic, call, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(
        self, topic: str, callback: Callable[[], None], version: Version | None
    ) -> None:
        """Read the record, then watch from the revision of that read.

        Not from the record's own revision: etcd compacts its history, and a watch from a
        revision it has compacted is cancelled at once; an owner whose record was written
        before the last compaction would read it, watch from there, be told, read it again,
        and so on for good. The read's revision is the present."""
        key = self._keys.owner(topic)
        try:
            read = await self._etcd.txn((), (get(key),))
            got = read.reads[0]
            if got is None or (version is not None and got.mod != int(version)):
                callback()  # gone, or changed since the caller saw it
                return
            self.watches.add(key, read.revision, callback)
        except MetadataError:
            callback()  # cannot watch: let the owner check its record again


class EtcdPersistence:
    def __init__(self, etcd: EtcdClient, keys: Keys, ledgers: EtcdLedgers) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ledgers = ledgers

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        """One transaction: the ledger's id comes from this process's block, so the record
        can name it in the same request."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        key, ledger_key = self._keys.persistence(topic), self._keys.ledger(lid)
        res = await self._etcd.txn(
            [missing(key), missing(ledger_key)],
            [put(ledger_key, md.to_json()), put(key, first_ranges(lid).to_json())],
        )
        if not res.succeeded:
            raise BadVersionError.at(key.decode(), NEW_VERSION)
        return Versioned(md, Version(res.revision)), Version(res.revision)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        """One transaction where a take-over made three (close, create, record)."""
        lid = await self._ledgers.new_id()
        md = replace(following, ledger_id=lid)
        record = next_ranges(ranges.value, lid)
        key, ledger_key = self._keys.persistence(topic), self._keys.ledger(lid)
        guards = [modified_at(self._keys.ledger(c.value.ledger_id), int(c.version)) for c in closed]
        writes = [put(self._keys.ledger(c.value.ledger_id), c.value.to_json()) for c in closed]
        res = await self._etcd.txn(
            [*guards, modified_at(key, int(ranges.version)), missing(ledger_key)],
            [*writes, put(ledger_key, md.to_json()), put(key, record.to_json())],
        )
        if not res.succeeded:
            raise BadVersionError.at(key.decode(), int(ranges.version))
        return Versioned(md, Version(res.revision)), Versioned(record, Version(res.revision))

    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        got = await self._etcd.get(self._keys.persistence(topic))
        return (
            None if got is None else Versioned(LedgerRanges.from_json(got.value), Version(got.mod))
        )

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        key = self._keys.persistence(topic)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, ranges.to_json())
        try:
            return await set_key(self._etcd, key, ranges.to_json(), version)
        except LookupError as exc:
            raise NoTopicPersistenceInfoError(topic) from exc

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.persistence(topic), version)
        except LookupError as exc:
            raise NoTopicPersistenceInfoError(topic) from exc


class EtcdSubscriptions:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    def is_partial_update_supported(self) -> bool:
        return False

    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        try:
            return await create_key(
                self._etcd, self._keys.subscriber(topic, subscriber), data.to_json()
            )
        except BadVersionError as exc:
            raise SubscriptionExistsError(f"{topic}/{subscriber}") from exc

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        if data.preferences is None or data.state is None:
            raise MetadataError(
                "etcd stores subscriptions whole: an update must carry preferences and state"
            )
        return await self.replace_subscription_data(topic, subscriber, data, version)

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        try:
            return await set_key(
                self._etcd, self._keys.subscriber(topic, subscriber), data.to_json(), version
            )
        except LookupError as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc

    async def delete_subscription_data(self, topic: str, subscriber: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.subscriber(topic, subscriber), version)
        except LookupError as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None:
        got = await self._etcd.get(self._keys.subscriber(topic, subscriber))
        if got is None:
            return None
        return Versioned(SubscriptionData.from_json(got.value), Version(got.mod))

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]:
        items, _ = await self._etcd.range(self._keys.subscribers(topic))
        return {
            Keys.name_of(i.key): Versioned(SubscriptionData.from_json(i.value), Version(i.mod))
            for i in items
        }


# Ledger ids a hub takes at once from ``ledger-ids``.
LEDGER_ID_BLOCK = 1024


class EtcdLedgers:
    """Ledger metadata, a key per ledger.

    A ledger id must be unique in the region for good (a replica may still hold a deleted
    ledger's entries). Each id used to be the revision of a write of ``ledger-ids``: a store
    write per ledger, and a ledger is made at every claim and take-over. Now the key holds the
    first id not yet taken, and a hub takes ``LEDGER_ID_BLOCK`` of them with one
    compare-and-set; the ids it does not use (it stops) are never used. A key left by the
    revision scheme has an empty value: the block starts after its last write, the highest id
    that scheme gave.
    """

    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self._ids = IdBlocks(self._take_block)

    async def new_id(self) -> int:
        """A ledger id no other ledger of the region has had or will have."""
        return await self._ids.next()

    async def _take_block(self) -> tuple[int, int]:
        key = self._keys.ledger_ids
        while True:
            got = (await self._etcd.txn((), (get(key),))).reads[0]
            if got is None:
                first, guard = 1, missing(key)
            else:
                first = int(got.value) if got.value else got.mod + 1
                guard = modified_at(key, got.mod)
            end = first + LEDGER_ID_BLOCK
            if (await self._etcd.txn([guard], [put(key, str(end).encode())])).succeeded:
                return first, end

    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        lid = await self.new_id()
        md = replace(metadata, ledger_id=lid)
        version = await create_key(self._etcd, self._keys.ledger(lid), md.to_json())
        return Versioned(md, version)

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        got = await self._etcd.get(self._keys.ledger(ledger_id))
        if got is None:
            return None
        md = LedgerMetadata.from_json(got.value, ledger_id)
        return Versioned(md, Version(got.mod))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        try:
            return await set_key(
                self._etcd, self._keys.ledger(metadata.ledger_id), metadata.to_json(), version
            )
        except LookupError as exc:
            raise NoLedgerMetadataError(str(metadata.ledger_id)) from exc

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.ledger(ledger_id), version)
        except LookupError as exc:
            raise NoLedgerMetadataError(str(ledger_id)) from exc

    async def list_ledgers(self) -> list[int]:
        items, _ = await self._etcd.range(self._keys.family("ledgers"), keys_only=True)
        return sorted(int(i.key.decode().rsplit("/", 1)[-1].lstrip("L")) for i in items)

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        # Both in one read: the record's mod revision against the ledger's create revision.
        got = await self._etcd.txn(
            (), (get(self._keys.persistence(topic)), get(self._keys.ledger(ledger_id)))
        )
        record, ledger = got.reads
        if record is None or ledger is None or record.mod <= ledger.create:
            return False
        return not holds_ledger(LedgerRanges.from_json(record.value), ledger_id)


class EtcdTopics:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def ensure_topic(self, topic: str) -> bool:
        key = self._keys.topic(topic)
        return (await self._etcd.txn([missing(key)], [put(key, b"")])).succeeded

    async def topic_exists(self, topic: str) -> bool:
        return await self._etcd.get(self._keys.topic(topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        return _config_of(await self._etcd.get(self._keys.topic(topic)))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        key = self._keys.topic(topic)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, config.to_json())
        try:
            return await set_key(self._etcd, key, config.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} does not exist") from exc

    async def list_topics(self) -> list[str]:
        items, _ = await self._etcd.range(self._keys.family("topics"), keys_only=True)
        return sorted(Keys.name_of(i.key) for i in items)

    async def delete_topic(self, topic: str) -> None:
        k = self._keys
        await self._etcd.txn(
            [],
            [
                delete(k.topic(topic)),
                delete(k.owner(topic)),
                delete(k.persistence(topic)),
                delete(k.subscribers(topic), prefix=True),
                delete(k.plan(topic)),
            ],
        )

    async def read_region_defaults(self) -> TopicConfig:
        got = await self._etcd.get(self._keys.defaults)
        return TopicConfig.from_json(got.value) if got else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        await self._etcd.txn([], [put(self._keys.defaults, config.to_json())])


class EtcdHubs:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def register_hub(self, address: str, load: HubLoad) -> int:
        """The epoch is the create revision of the alive key: new for every lease."""
        host, alive = self._keys.host(address), self._keys.alive(address)
        await self._etcd.txn([missing(host)], [put(host, b"")])
        # Left by an earlier lease of ours that has not expired yet: ours to replace.
        await self._etcd.txn([], [delete(alive)])  # a new key: a new create revision
        await self._etcd.txn([], [put(alive, load.to_json(), self._etcd.lease)])
        got = await self._etcd.get(alive)
        if got is None:
            raise MetadataError(f"hub {address}: its alive record vanished as it was written")
        return got.create

    async def update_load(self, address: str, load: HubLoad) -> None:
        key = self._keys.alive(address)
        res = await self._etcd.txn([exists(key)], [put(key, load.to_json(), self._etcd.lease)])
        if not res.succeeded:
            raise MetadataError(f"hub {address} is not registered")

    async def unregister_hub(self, address: str) -> None:
        await self._etcd.txn([], [delete(self._keys.alive(address))])

    async def alive_epoch(self, address: str) -> int | None:
        got = await self._etcd.get(self._keys.alive(address))
        return None if got is None else got.create

    async def list_hubs(self) -> list[HubStatus]:
        hosts, _ = await self._etcd.range(self._keys.family("hosts"), keys_only=True)
        alive_items, _ = await self._etcd.range(self._keys.family("alive"))
        alive = {Keys.name_of(i.key): i for i in alive_items}
        out = []
        for address in sorted(Keys.name_of(i.key) for i in hosts):
            got = alive.get(address)
            if got is None:
                out.append(HubStatus(address, alive=False))
                continue
            try:
                load: HubLoad | None = HubLoad.from_json(got.value)
            except MetadataError:
                load = None
            out.append(HubStatus(address, True, got.create, load))
        return out


class EtcdAcls:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        prefix = self._keys.family("acls")
        items, revision = await self._etcd.range(prefix)
        if watch is not None:
            await self._etcd.watch_once(prefix, revision, watch, prefix=True)
        return {
            Keys.name_of(i.key): Versioned(AclEntry.from_json(i.value), Version(i.mod))
            for i in items
        }

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        got = await self._etcd.get(self._keys.acl(name))
        return None if got is None else Versioned(AclEntry.from_json(got.value), Version(got.mod))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        key = self._keys.acl(name)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, entry.to_json())
        if version == ANY_VERSION:
            res = await self._etcd.txn([], [put(key, entry.to_json())])
            return Version(res.revision)
        try:
            return await set_key(self._etcd, key, entry.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc

    async def delete_acl(self, name: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.acl(name), version)
        except LookupError as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc


class EtcdPlans:
    """Topics' plans (``hedwig.metadata.plans``): a key per spread topic, compare-and-set on
    its mod revision; deleting the topic deletes it (and so fires its watch).

    Hubs learn which topics have a plan from one range read of the plans' prefix (keys only)
    and one watch of it (``planned_topics``), and read and watch the plans of those topics
    alone. The per-topic watches share one etcd watch of the prefix, as owner watches do: a
    watch each was a request and an answer on the watch stream per topic, and a watcher in
    etcd per topic for good."""

    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys
        self.watches = PrefixWatch(etcd, keys.family("plans"), etcd.watch_from)

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        prefix = self._keys.family("plans")
        items, revision = await self._etcd.range(prefix, keys_only=True)
        if watch is not None:
            # From the read's revision: a plan created or deleted since fires it.
            self._etcd.watch_from(prefix, revision, watch, prefix=True)
        return frozenset(Keys.name_of(i.key) for i in items)

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        key = self._keys.plan(topic)
        # Read in a transaction for its header revision: a watch from there misses nothing,
        # and fires on creation too when there is no plan yet.
        res = await self._etcd.txn([], [get(key)])
        got = res.reads[0]
        if watch is not None:
            self.watches.add(key, res.revision, watch)
        return None if got is None else Versioned(TopicPlan.from_json(got.value), Version(got.mod))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        key = self._keys.plan(topic)
        if version in (NEW_VERSION, ANY_VERSION):
            topic_key = self._keys.topic(topic)
            guards = (
                [exists(topic_key)] if version == ANY_VERSION else [exists(topic_key), missing(key)]
            )
            res = await self._etcd.txn(guards, [put(key, plan.to_json())], [get(topic_key)])
            if res.succeeded:
                return Version(res.revision)
            if res.reads[0] is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            raise BadVersionError.at(key.decode(), version)
        try:
            return await set_key(self._etcd, key, plan.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc

    async def delete_plan(self, topic: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.plan(topic), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc


class EtcdSession:
    def __init__(self, etcd: EtcdClient) -> None:
        self._etcd = etcd

    @property
    def state(self) -> SessionState:
        return self._etcd.state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._etcd.add_listener(listener)


class EtcdMetadataStore:
    """Every manager of one region on one etcd client and its lease."""

    def __init__(
        self,
        target: str,
        region: str,
        *,
        prefix: str = ROOT,
        session_timeout: float = 6.0,
        username: str | None = None,
        password: str | None = None,
        ca: bytes | None = None,
        cert: bytes | None = None,
        key: bytes | None = None,
        credentials_source: CredentialsSource | None = None,
    ) -> None:
        self.region = region
        self.keys = Keys(region, prefix)
        self.etcd = EtcdClient(
            target,
            ttl_s=session_timeout,
            username=username,
            password=password,
            ca=ca,
            cert=cert,
            key=key,
            credentials_source=credentials_source,
        )
        self.ledgers = EtcdLedgers(self.etcd, self.keys)
        self.ownership = EtcdOwnership(self.etcd, self.keys, self.ledgers)
        self.persistence = EtcdPersistence(self.etcd, self.keys, self.ledgers)
        self.subscriptions = EtcdSubscriptions(self.etcd, self.keys)
        self.topics = EtcdTopics(self.etcd, self.keys)
        self.hubs = EtcdHubs(self.etcd, self.keys)
        self.acls = EtcdAcls(self.etcd, self.keys)
        self.plans = EtcdPlans(self.etcd, self.keys)
        self.session = EtcdSession(self.etcd)

    async def start(self) -> None:
        await self.etcd.start()

    async def close(self) -> None:
        await self.ownership.watches.close()
        await self.plans.watches.close()
        with contextlib.suppress(MetadataError):
            await self.etcd.close()

    async def __aenter__(self) -> EtcdMetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["EtcdMetadataStore", "Keys"]
