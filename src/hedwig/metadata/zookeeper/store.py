"""The metadata managers on ZooKeeper: versions are znode versions, ownership is ephemeral.

Subscription data is one znode per subscription holding preferences and state together, so
partial updates are not supported (``is_partial_update_supported`` is False): an update must
carry the whole record, as the seed allows.
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
from hedwig.metadata.id_blocks import IdBlocks
from hedwig.metadata.layout import ROOT, Layout
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
from hedwig.metadata.topic_logs import first_ranges, holds_ledger, next_ranges, start_in_steps
from hedwig.metadata.zookeeper.bridge import NodeExists, NoNode, Op, ZkBridge
from hedwig.protocol.names import encode_name

DEFAULT_SESSION_TIMEOUT = 6.0


def _v(version: Version) -> int:
    return -1 if version == ANY_VERSION else int(version)


# Ledger listings at least this long are parsed off the event loop.
LEDGER_IDS_ON_THREAD = 50_000


def _ledger_ids(names: list[str]) -> list[int]:
    return sorted(map(Layout.ledger_id_of, names))


class ZkOwnership:
    def __init__(self, zk: ZkBridge, layout: Layout, ledgers: ZkLedgers) -> None:
        self._zk = zk
        self._layout = layout
        self._ledgers = ledgers  # ids of the first ledgers claims make
        # Whether the last topic claimed existed already: claims come in waves of one kind
        # (first publishes create their topics; a failover takes existing ones over), and
        # the next claim is tried the way the last one needed (``claim_topic``).
        self._claimed_existing = False

    async def read_owner_info(self, topic: str) -> Versioned[HubInfo] | None:
        got = await self._zk.get_or_none(self._layout.owner(topic))
        if got is None:
            return None
        data, stat = got
        return Versioned(HubInfo.from_json(data), Version(stat.version))

    async def write_owner_info(self, topic: str, owner: HubInfo, version: Version) -> Version:
        path = self._layout.owner(topic)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, owner.to_json(), ephemeral=True)
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            except NoNode as exc:
                raise MetadataError(f"topic {topic!r} does not exist") from exc
            return Version(stat.version)
        try:
            stat = await self._zk.set(path, owner.to_json(), _v(version))
        except NoNode as exc:
            raise NoTopicOwnerInfoError(topic) from exc
        return Version(stat.version)

    async def claim_topic(
        self, topic: str, owner: HubInfo, first: LedgerMetadata | None = None
    ) -> TopicClaim:
        """A ``multi`` making the topic with its record (and ``first`` with the persistence
        record naming it, as ``ZkPersistence.start_topic_log``); if the topic exists, the
        record alone (a ``multi`` cannot read, so whose record is in the way takes a read).

        After a claim of an existing topic the record alone is tried first: a failover's
        take-overs were each a failed ``multi`` and then the record, a ninth of the
        ZooKeeper requests of a take-over. A wrong guess costs the request it would have
        saved."""
        if self._claimed_existing:
            claim = await self._claim_existing(topic, owner)
            if claim is not None:
                return claim
        layout = self._layout
        ops = [
            Op("create", layout.topic(topic)),
            Op("create", layout.subscribers(topic)),
            Op("create", layout.owner(topic), value=owner.to_json(), ephemeral=True),
        ]
        md = None
        if first is not None:
            md = replace(first, ledger_id=await self._ledgers.new_id())
            ops.append(Op("create", layout.ledger(md.ledger_id), value=md.to_json()))
            ops.append(
                Op("create", layout.persistence(topic), value=first_ranges(md.ledger_id).to_json())
            )
        made, _, claimed, *started = await self._zk.transaction(ops)
        if made is None and claimed is None and not any(started):
            # (``_claimed_existing`` is false here: a guess that it was an existing topic
            # found none and said so.)
            # New znodes' versions: the owner record's, the ledger's, the persistence record's.
            log = None if md is None else (Versioned(md, Version(0)), Version(0))
            return TopicClaim(Version(0), new=True, log=log)
        if first is not None and not isinstance(made, (NodeExists, NoNode)):
            # Only the first ledger's records were in the way (its id taken: never, unless
            # ids were given twice); the claim alone, and its log in steps after.
            return await self.claim_topic(topic, owner)
        if not isinstance(made, NodeExists):
            # NoNode: the region's tree is not there; the usual path says so.
            if isinstance(made, NoNode):
                return TopicClaim(None, owner=await self.read_owner_info(topic))
            raise made or claimed or MetadataError(f"claiming topic {topic!r} failed")
        claim = await self._claim_existing(topic, owner)
        if claim is None:  # deleted since the multi found it
            raise MetadataError(f"topic {topic!r} does not exist")
        return claim

    async def _claim_existing(self, topic: str, owner: HubInfo) -> TopicClaim | None:
        """The owner record of a topic that exists; ``None`` if it does not."""
        # A transaction of one operation rather than a create: it goes to ZooKeeper with
        # the other transactions of its turn (a survivor of a failover makes hundreds).
        (made,) = await self._zk.transaction(
            [Op("create", self._layout.owner(topic), value=owner.to_json(), ephemeral=True)]
        )
        if isinstance(made, NoNode):
            self._claimed_existing = False
            return None
        self._claimed_existing = True
        if isinstance(made, NodeExists):
            return TopicClaim(None, owner=await self.read_owner_info(topic))
        if made is not None:
            raise made
        return TopicClaim(Version(0))  # a new znode's version

    async def delete_owner_info(self, topic: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.owner(topic), _v(version))
        except NoNode as exc:
            raise NoTopicOwnerInfoError(topic) from exc

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        # ZooKeeper watches from now; a change between the caller's read and now is seen as
        # a version other than ``version`` when the watch is set, and fires it too. kazoo's
        # watch function holds the topic itself (``arg``): nothing else is kept per watch.
        key = encode_name(topic)
        self._zk.watch_with(
            self._layout.owner_of_key(key),
            callback,
            topic,
            None if version is None else _v(version),
            key=key,
        )


class ZkPersistence:
    def __init__(self, zk: ZkBridge, layout: Layout, ledgers: ZkLedgers) -> None:
        self._zk = zk
        self._layout = layout
        self._ledgers = ledgers

    async def start_topic_log(
        self, topic: str, first: LedgerMetadata
    ) -> tuple[Versioned[LedgerMetadata], Version]:
        """One ``multi``: the ledger's id comes from this process's block
        (``ZkLedgers.new_id``), so the record can name it in the same request. Two requests
        (a sequential znode, then the record naming its number) were half of a first
        publish's ZooKeeper requests, each a round of kazoo's threads."""
        lid = await self._ledgers.new_id()
        md = replace(first, ledger_id=lid)
        path = self._layout.persistence(topic)
        made_ledger, made_record = await self._zk.transaction(
            [
                Op("create", self._layout.ledger(lid), value=md.to_json()),
                Op("create", path, value=first_ranges(lid).to_json()),
            ]
        )
        if made_ledger is None and made_record is None:
            return Versioned(md, Version(0)), Version(0)  # a new znode's version
        if isinstance(made_record, NodeExists):
            raise BadVersionError.at(path, NEW_VERSION)
        # The topic's node is gone (deleted meanwhile), or the id was taken (never, unless
        # ids were given twice): as before, in two steps, which make the path if need be.
        return await start_in_steps(self._ledgers, self, topic, first)

    async def continue_topic_log(
        self,
        topic: str,
        ranges: Versioned[LedgerRanges],
        closed: Sequence[Versioned[LedgerMetadata]],
        following: LedgerMetadata,
    ) -> tuple[Versioned[LedgerMetadata], Versioned[LedgerRanges]]:
        """One ``multi`` where a take-over made three requests (close, create, record)."""
        lid = await self._ledgers.new_id()
        md = replace(following, ledger_id=lid)
        record = next_ranges(ranges.value, lid)
        path = self._layout.persistence(topic)
        ops = [
            Op("set", self._layout.ledger(c.value.ledger_id), _v(c.version), c.value.to_json())
            for c in closed
        ]
        ops.append(Op("create", self._layout.ledger(lid), value=md.to_json()))
        ops.append(Op("set", path, _v(ranges.version), record.to_json()))
        failed = [r for r in await self._zk.transaction(ops) if r is not None]
        if failed:
            raise BadVersionError(
                f"taking over {topic!r}: {failed[0]}", path=path, expected=int(ranges.version)
            )
        # A set adds one to the znode's version; a created znode's is 0.
        return Versioned(md, Version(0)), Versioned(record, Version(int(ranges.version) + 1))

    async def read_topic_persistence_info(self, topic: str) -> Versioned[LedgerRanges] | None:
        got = await self._zk.get_or_none(self._layout.persistence(topic))
        if got is None:
            return None
        return Versioned(LedgerRanges.from_json(got[0]), Version(got[1].version))

    async def write_topic_persistence_info(
        self, topic: str, ranges: LedgerRanges, version: Version
    ) -> Version:
        path = self._layout.persistence(topic)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, ranges.to_json(), makepath=True)
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            return Version(stat.version)
        try:
            stat = await self._zk.set(path, ranges.to_json(), _v(version))
        except NoNode as exc:
            raise NoTopicPersistenceInfoError(topic) from exc
        return Version(stat.version)

    async def delete_topic_persistence_info(self, topic: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.persistence(topic), _v(version))
        except NoNode as exc:
            raise NoTopicPersistenceInfoError(topic) from exc


# Subscription records read at once by ``read_subscriptions`` (under the requests the bridge
# lets kazoo hold, ``bridge.MAX_IN_FLIGHT``; more wait their turn there).
SUBSCRIPTION_READS_AT_ONCE = 64


class ZkSubscriptions:
    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    def is_partial_update_supported(self) -> bool:
        return False

    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        path = self._layout.subscriber(topic, subscriber)
        try:
            _, stat = await self._zk.create(path, data.to_json(), makepath=True)
        except NodeExists as exc:
            raise SubscriptionExistsError(f"{topic}/{subscriber}") from exc
        return Version(stat.version)

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        if data.preferences is None or data.state is None:
            raise MetadataError(
                "ZooKeeper stores subscriptions whole: an update must carry preferences and state"
            )
        return await self.replace_subscription_data(topic, subscriber, data, version)

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        try:
            stat = await self._zk.set(
                self._layout.subscriber(topic, subscriber), data.to_json(), _v(version)
            )
        except NoNode as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc
        return Version(stat.version)

    async def delete_subscription_data(self, topic: str, subscriber: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.subscriber(topic, subscriber), _v(version))
        except NoNode as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None:
        got = await self._zk.get_or_none(self._layout.subscriber(topic, subscriber))
        if got is None:
            return None
        return Versioned(SubscriptionData.from_json(got[0]), Version(got[1].version))

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]:
        try:
            names = await self._zk.children(self._layout.subscribers(topic))
        except NoNode:
            return {}
        # A read per subscription (a znode each), SUBSCRIPTION_READS_AT_ONCE in flight: one
        # after another, a topic of 100 subscriptions took 100 round trips (26 reads of them
        # all a second, against etcd's 1,000 with one range read).
        out: dict[str, Versioned[SubscriptionData]] = {}
        subscribers = [Layout.name_of(znode) for znode in names]
        for start in range(0, len(subscribers), SUBSCRIPTION_READS_AT_ONCE):
            chunk = subscribers[start : start + SUBSCRIPTION_READS_AT_ONCE]
            read = await asyncio.gather(*(self.read_subscription_data(topic, s) for s in chunk))
            for name, got in zip(chunk, read, strict=True):
                if got is not None:  # deleted since listed
                    out[name] = got
        return out


# Ledger ids a hub takes at once from ``ledger-ids``.
LEDGER_ID_BLOCK = 1024
# The first block's first id: past every id the earlier scheme (each ledger a sequential
# znode, numbered by a signed 32-bit counter) can have given or will give, so hubs of both
# schemes side by side (a rolling upgrade) never give one id twice.
FIRST_BLOCK_ID = 1 << 31


class ZkLedgers:
    """Ledger metadata, a znode per ledger, ids handed out in blocks from ``ledger-ids``.

    A ledger id must be unique in the region for good (a replica may still hold a deleted
    ledger's entries). Each id was a sequential znode's number, known only once the znode was
    made, so a topic's first ledger and the record naming it took two requests. Now the
    ``ledger-ids`` znode holds the first id not yet taken and a hub takes ``LEDGER_ID_BLOCK``
    of them with one compare-and-set (as on etcd); ids it does not use are never used.
    """

    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout
        self._ids = IdBlocks(self._take_block)

    async def new_id(self) -> int:
        """A ledger id no other ledger of the region has had or will have."""
        return await self._ids.next()

    async def _take_block(self) -> tuple[int, int]:
        # A write whose answer was lost (the connection broke) may have been applied: the
        # next try reads the znode again and takes the block after it. Ids are skipped,
        # never given twice.
        path = self._layout.ledger_ids
        while True:
            got = await self._zk.get_or_none(path)
            first = FIRST_BLOCK_ID if got is None else int(got[0])
            end = first + LEDGER_ID_BLOCK
            try:
                if got is None:
                    await self._zk.create(path, str(end).encode(), makepath=True)
                else:
                    await self._zk.set(path, str(end).encode(), got[1].version)
            except (NodeExists, BadVersionError):
                continue  # another hub took one first
            return first, end

    async def create_ledger(self, metadata: LedgerMetadata) -> Versioned[LedgerMetadata]:
        while True:
            md = replace(metadata, ledger_id=await self.new_id())
            try:
                _, stat = await self._zk.create(
                    self._layout.ledger(md.ledger_id), md.to_json(), makepath=True
                )
            except NodeExists:
                continue  # only if an id was given twice: never reuse it
            return Versioned(md, Version(stat.version))

    async def read_ledger(self, ledger_id: int) -> Versioned[LedgerMetadata] | None:
        got = await self._zk.get_or_none(self._layout.ledger(ledger_id))
        if got is None:
            return None
        md = LedgerMetadata.from_json(got[0], ledger_id)
        return Versioned(md, Version(got[1].version))

    async def write_ledger(self, metadata: LedgerMetadata, version: Version) -> Version:
        try:
            stat = await self._zk.set(
                self._layout.ledger(metadata.ledger_id), metadata.to_json(), _v(version)
            )
        except NoNode as exc:
            raise NoLedgerMetadataError(str(metadata.ledger_id)) from exc
        return Version(stat.version)

    async def delete_ledger(self, ledger_id: int, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.ledger(ledger_id), _v(version))
        except NoNode as exc:
            raise NoLedgerMetadataError(str(ledger_id)) from exc

    async def list_ledgers(self) -> list[int]:
        try:
            names = await self._zk.children(self._layout.ledgers)
        except NoNode:
            return []
        if len(names) < LEDGER_IDS_ON_THREAD:
            return _ledger_ids(names)
        # A region's every ledger (1.3 million after a failover at a million topics): parsed
        # and sorted on the loop, the hub stood still for 2 s. On a thread, the loop keeps
        # its turns (the interpreter switches every few milliseconds).
        return await asyncio.get_running_loop().run_in_executor(None, _ledger_ids, names)

    async def left_over(self, ledger_id: int, topic: str) -> bool:
        # The ledger's czxid never changes, so two reads are as good as one: what is
        # decided on is the record as read, last written at its mzxid.
        ledger = await self._zk.exists(self._layout.ledger(ledger_id))
        record = await self._zk.get_or_none(self._layout.persistence(topic))
        if ledger is None or record is None or record[1].mzxid <= ledger.czxid:
            return False
        return not holds_ledger(LedgerRanges.from_json(record[0]), ledger_id)


class ZkTopics:
    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def ensure_topic(self, topic: str) -> bool:
        created = True
        for path in (self._layout.topic(topic), self._layout.subscribers(topic)):
            try:
                await self._zk.create(path, b"", makepath=True)
            except NodeExists:
                created = False
        return created

    async def topic_exists(self, topic: str) -> bool:
        return await self._zk.exists(self._layout.topic(topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        got = await self._zk.get_or_none(self._layout.topic(topic))
        if got is None:
            return None
        return Versioned(TopicConfig.from_json(got[0]), Version(got[1].version))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        path = self._layout.topic(topic)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, config.to_json(), makepath=True)
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            await self.ensure_topic(topic)
            return Version(stat.version)
        try:
            stat = await self._zk.set(path, config.to_json(), _v(version))
        except NoNode as exc:
            raise MetadataError(f"topic {topic!r} does not exist") from exc
        return Version(stat.version)

    async def list_topics(self) -> list[str]:
        try:
            names = await self._zk.children(self._layout.topics)
        except NoNode:
            return []
        return sorted(Layout.name_of(n) for n in names)

    async def delete_topic(self, topic: str) -> None:
        # Its mark in the index of planned topics first: a mark left by a deletion cut short
        # only costs hubs a read of a plan that is not there, while a plan left without its
        # mark would be ignored by them. (A plan written meanwhile marks the topic again.)
        with contextlib.suppress(NoNode):
            await self._zk.delete(self._layout.planned_marker(topic))
        await self._zk.delete_recursive(self._layout.topic(topic))

    async def read_region_defaults(self) -> TopicConfig:
        got = await self._zk.get_or_none(self._layout.defaults)
        return TopicConfig.from_json(got[0]) if got else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        try:
            await self._zk.set(self._layout.defaults, config.to_json())
        except NoNode:
            await self._zk.create(self._layout.defaults, config.to_json(), makepath=True)


class ZkHubs:
    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def register_hub(self, address: str, load: HubLoad) -> int:
        await self._zk.ensure_path(self._layout.host(address))
        path = self._layout.alive(address)
        try:
            _, stat = await self._zk.create(path, load.to_json(), ephemeral=True)
        except NodeExists:
            # Left by an earlier session of ours that has not expired yet: it is ours to replace.
            await self._zk.delete(path)
            _, stat = await self._zk.create(path, load.to_json(), ephemeral=True)
        return int(stat.czxid)

    async def update_load(self, address: str, load: HubLoad) -> None:
        await self._zk.set(self._layout.alive(address), load.to_json())

    async def unregister_hub(self, address: str) -> None:
        with contextlib.suppress(NoNode):
            await self._zk.delete(self._layout.alive(address))

    async def alive_epoch(self, address: str) -> int | None:
        stat = await self._zk.exists(self._layout.alive(address))
        return None if stat is None else int(stat.czxid)

    async def list_hubs(self) -> list[HubStatus]:
        try:
            names = await self._zk.children(self._layout.hosts)
        except NoNode:
            return []
        out = []
        for znode in sorted(names):
            address = Layout.name_of(znode)
            got = await self._zk.get_or_none(self._layout.alive(address))
            if got is None:
                out.append(HubStatus(address, alive=False))
            else:
                try:
                    load: HubLoad | None = HubLoad.from_json(got[0])
                except MetadataError:
                    load = None
                out.append(HubStatus(address, True, int(got[1].czxid), load))
        return out


class ZkAcls:
    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout

    async def list_acls(
        self, watch: Callable[[], None] | None = None
    ) -> dict[str, Versioned[AclEntry]]:
        parent = self._layout.acls
        out: dict[str, Versioned[AclEntry]] = {}
        if watch is None:
            for znode in await self._zk.children(parent):
                got = await self._zk.get_or_none(f"{parent}/{znode}")
                if got is not None:
                    out[Layout.name_of(znode)] = Versioned(
                        AclEntry.from_json(got[0]), Version(got[1].version)
                    )
            return out
        # One watch over the list and every entry: whichever changes first fires it.
        fire = self._zk._one_shot(watch)
        for znode in await self._zk.children_watched(parent, fire):
            got = await self._zk.get_watched(f"{parent}/{znode}", fire)
            if got is not None:
                out[Layout.name_of(znode)] = Versioned(
                    AclEntry.from_json(got[0]), Version(got[1].version)
                )
        return out

    async def read_acl(self, name: str) -> Versioned[AclEntry] | None:
        got = await self._zk.get_or_none(self._layout.acl(name))
        if got is None:
            return None
        return Versioned(AclEntry.from_json(got[0]), Version(got[1].version))

    async def write_acl(self, name: str, entry: AclEntry, version: Version) -> Version:
        path = self._layout.acl(name)
        if version == NEW_VERSION:
            try:
                _, stat = await self._zk.create(path, entry.to_json())
            except NodeExists as exc:
                raise BadVersionError.at(path, version) from exc
            return Version(stat.version)
        if version == ANY_VERSION:
            try:
                _, stat = await self._zk.create(path, entry.to_json())
                return Version(stat.version)
            except NodeExists:
                pass
        try:
            stat = await self._zk.set(
                path, entry.to_json(), -1 if version == ANY_VERSION else version
            )
        except NoNode as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc
        return Version(stat.version)

    async def delete_acl(self, name: str, version: Version) -> None:
        try:
            await self._zk.delete(self._layout.acl(name), -1 if version == ANY_VERSION else version)
        except NoNode as exc:
            raise MetadataError(f"no ACL entry {name!r}") from exc


# The data of the ``planned`` index once it lists every plan (see ``ZkPlans``).
INDEXED = b"indexed"
# Topics looked at together while indexing the plans of a region written before the index.
_INDEX_BATCH = 500
# Tries of a plan's creation when its mark goes meanwhile (a deletion of the plan racing it).
_MARK_TRIES = 5


class ZkPlans:
    """Plans live under their topic (``topics/<T>/plan``) and each planned topic is also
    marked in ``planned/<T>``, so hubs learn which topics have a plan from one watched list
    instead of a read and a watch per topic (most topics have none).

    The rule kept: a plan exists only while its mark does. A creation marks the topic first
    and creates the plan in one transaction with a check that the mark is still there; a
    deletion removes both in one transaction. A mark without a plan (a deletion cut short)
    costs a read; the reverse would hide the plan, and cannot happen.

    A region written before the index existed has plans without marks: the first
    ``planned_topics`` of a store marks them (once; the index's data says it is done)."""

    def __init__(self, zk: ZkBridge, layout: Layout) -> None:
        self._zk = zk
        self._layout = layout
        self._indexed = False

    async def planned_topics(self, watch: Callable[[], None] | None = None) -> frozenset[str]:
        if not self._indexed:
            await self._index()
            self._indexed = True
        path = self._layout.planned
        if watch is None:
            names = await self._zk.children(path)
        else:
            names = await self._zk.children_watched(path, self._zk._one_shot(watch))
        return frozenset(Layout.name_of(n) for n in names)

    async def _index(self) -> None:
        """Mark every topic that has a plan, unless the index says it was done."""
        path = self._layout.planned
        got = await self._zk.get_or_none(path)
        if got is not None and got[0] == INDEXED:
            return
        if got is None:
            with contextlib.suppress(NodeExists):
                await self._zk.create(path, b"", makepath=True)
        try:
            topics = [Layout.name_of(n) for n in await self._zk.children(self._layout.topics)]
        except NoNode:
            topics = []
        for i in range(0, len(topics), _INDEX_BATCH):
            batch = topics[i : i + _INDEX_BATCH]
            found = await asyncio.gather(*(self._zk.exists(self._layout.plan(t)) for t in batch))
            for topic, stat in zip(batch, found, strict=True):
                if stat is not None:
                    await self._mark(topic)
        await self._zk.set(path, INDEXED)

    async def _mark(self, topic: str) -> None:
        with contextlib.suppress(NodeExists):
            await self._zk.create(self._layout.planned_marker(topic), b"", makepath=True)

    async def read_plan(
        self, topic: str, watch: Callable[[], None] | None = None
    ) -> Versioned[TopicPlan] | None:
        path = self._layout.plan(topic)
        if watch is None:
            got = await self._zk.get_or_none(path)
        else:
            # A data watch when the record exists, else an exists watch (which also fires on
            # creation); whichever is set fires once.
            fire = self._zk._one_shot(watch)
            got = await self._zk.get_watched(path, fire)
            if got is None and await self._zk.exists_watched(path, fire) is not None:
                got = await self._zk.get_watched(path, fire)  # created meanwhile
        if got is None:
            return None
        return Versioned(TopicPlan.from_json(got[0]), Version(got[1].version))

    async def write_plan(self, topic: str, plan: TopicPlan, version: Version) -> Version:
        path = self._layout.plan(topic)
        if version in (NEW_VERSION, ANY_VERSION):
            created = await self._create(topic, plan)
            if created is not None:
                return created
            if version == NEW_VERSION:
                raise BadVersionError.at(path, version)
        try:
            stat = await self._zk.set(path, plan.to_json(), _v(version))
        except NoNode as exc:
            raise MetadataError(f"topic {topic!r} has no plan") from exc
        return Version(stat.version)

    async def _create(self, topic: str, plan: TopicPlan) -> Version | None:
        """Create the plan (``None``: there is one already)."""
        path, marker = self._layout.plan(topic), self._layout.planned_marker(topic)
        for _ in range(_MARK_TRIES):
            if await self._zk.exists(self._layout.topic(topic)) is None:
                raise MetadataError(f"topic {topic!r} does not exist")
            await self._mark(topic)
            check, create = await self._zk.transaction(
                [Op("check", marker), Op("create", path, value=plan.to_json())]
            )
            if check is None and create is None:
                return Version(0)
            if isinstance(create, NodeExists):
                return None
            if isinstance(create, NoNode):
                raise MetadataError(f"topic {topic!r} does not exist")
            if not isinstance(check, NoNode):
                raise check or create or MetadataError(f"creating {path} failed")
            # The mark went between our marking and the transaction: mark again.
        raise MetadataError(f"topic {topic!r}: its plan is being created and deleted at once")

    async def delete_plan(self, topic: str, version: Version) -> None:
        path = self._layout.plan(topic)
        plan, mark = await self._zk.transaction(
            [Op("delete", path, _v(version)), Op("delete", self._layout.planned_marker(topic))]
        )
        if plan is None and mark is None:
            return
        if isinstance(plan, NoNode):
            raise MetadataError(f"topic {topic!r} has no plan")
        if isinstance(plan, BadVersionError):
            raise plan
        if isinstance(mark, NoNode):  # a plan from before the index, not marked yet
            try:
                await self._zk.delete(path, _v(version))
            except NoNode as exc:
                raise MetadataError(f"topic {topic!r} has no plan") from exc
            return
        raise plan or mark or MetadataError(f"deleting {path} failed")


class ZkSession:
    def __init__(self, zk: ZkBridge) -> None:
        self._zk = zk

    @property
    def state(self) -> SessionState:
        return self._zk.state

    def add_listener(self, listener: Callable[[SessionState], None]) -> None:
        self._zk.add_listener(listener)


class ZkMetadataStore:
    """Every manager of one region on one ZooKeeper session."""

    def __init__(
        self,
        hosts: str,
        region: str,
        *,
        session_timeout: float = DEFAULT_SESSION_TIMEOUT,
        digest: str | None = None,
    ) -> None:
        self.region = region
        self.layout = Layout(region)
        self.zk = ZkBridge(hosts, session_timeout=session_timeout, digest=digest)
        # kazoo files each owner watch by its topic's name, not a path of its own.
        self.zk.file_watches_by_end(f"{self.layout.topics}/", f"/{Layout.OWNER}")
        self.ledgers = ZkLedgers(self.zk, self.layout)
        self.ownership = ZkOwnership(self.zk, self.layout, self.ledgers)
        self.persistence = ZkPersistence(self.zk, self.layout, self.ledgers)
        self.subscriptions = ZkSubscriptions(self.zk, self.layout)
        self.topics = ZkTopics(self.zk, self.layout)
        self.hubs = ZkHubs(self.zk, self.layout)
        self.acls = ZkAcls(self.zk, self.layout)
        self.plans = ZkPlans(self.zk, self.layout)
        self.session = ZkSession(self.zk)

    async def start(self) -> None:
        await self.zk.start()
        # Several pools (regions, each with its own digest) share one ensemble under ROOT.
        await self.zk.ensure_shared(ROOT)
        for path in (
            self.layout.topics,
            self.layout.hosts,
            self.layout.ledgers,
            self.layout.acls,
        ):
            await self.zk.ensure_path(path)

    async def close(self) -> None:
        await self.zk.close()

    async def __aenter__(self) -> ZkMetadataStore:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
