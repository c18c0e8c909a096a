"""Topic ownership on ZooKeeper: a topic's owner record is the ephemeral znode
``topics/<T>/hub`` of its owner's session, claimed by creating it (``docs/zookeeper-layout.md``).

A claim is a ``multi`` (the topic, its subscriber root, the owner record, and the first
ledger with the record naming it when the claim makes the topic); transactions of one turn
go to ZooKeeper together (``hedwig.metadata.zookeeper.client.writes``). A hub watches the
owner record of every topic it owns, one watch filed by the topic's name each.
"""

from __future__ import annotations

from collections.abc import Callable

from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    MetadataError,
    NoTopicOwnerInfoError,
)
from hedwig.metadata.layout import Layout
from hedwig.metadata.records import (
    NEW_VERSION,
    HubInfo,
    LedgerMetadata,
    TopicClaim,
    Version,
    Versioned,
)
from hedwig.metadata.topic_logs import first_ranges
from hedwig.metadata.zookeeper.client import NodeExists, NoNode, Op, ZkClient
from hedwig.metadata.zookeeper.ledgers import ZkLedgers
from hedwig.metadata.zookeeper.versions import zk_version
from hedwig.protocol.names import encode_name


class ZkOwnership:
    def __init__(self, zk: ZkClient, layout: Layout, ledgers: ZkLedgers) -> None:
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
            stat = await self._zk.set(path, owner.to_json(), zk_version(version))
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
            await self._zk.delete(self._layout.owner(topic), zk_version(version))
        except NoNode as exc:
            raise NoTopicOwnerInfoError(topic) from exc

    def watch_owner(
        self, topic: str, callback: Callable[[str], None], version: Version | None = None
    ) -> None:
        # ZooKeeper watches from now; a change between the caller's read and now is seen as
        # a version other than ``version`` when the watch is set, and fires it too. The
        # watcher holds the topic itself (``arg``) and is filed by its encoded name
        # (``key``): nothing else is kept per watch.
        key = encode_name(topic)
        self._zk.watch_with(
            self._layout.owner_of_key(key),
            callback,
            topic,
            None if version is None else zk_version(version),
            key=key,
        )
