"""Topic ownership on etcd: owner records bound to the owner's leases, claims in as few
transactions as a wave of them allows, and owner watches on one watch of the owners' prefix.

An owner record (``owners/<T>``) is written by compare-and-set and attached to one of the
owner's leases (``lease_keeper.LeaseKeeper.owner_lease``): when the owner's session ends its
leases go, the records with them, and the topics are free. A claim creates a new topic with its
record (and, in a wave of first publishes, its first ledger and the persistence record naming
it) in one transaction, or writes the record of an existing topic in one that also reads what
the take-over reads next (the topic's configuration and its ledger ranges); refused, it reads
whose record is in the way in the same request. Claims come in waves of one kind, so each is
tried the way the last one needed first.

An owner watch starts from the revision of a read made for it, or from the version the caller
saw when the owners' prefix watch has not delivered past it (a claim's own write: no read).
Never from the record's own revision: etcd compacts its history, and a watch from a compacted
revision is cancelled at once (``watches.PrefixWatch``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from msgspec.structs import replace

from hedwig.errors import MetadataError, NoTopicOwnerInfoError
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, delete_key, put_beside_topic, set_key
from hedwig.metadata.etcd.kv import Item
from hedwig.metadata.etcd.ledgers import EtcdLedgers
from hedwig.metadata.etcd.topics import config_of
from hedwig.metadata.etcd.watches import PrefixWatch
from hedwig.metadata.etcd.wire import exists, get, missing, put
from hedwig.metadata.records import (
    NEW_VERSION,
    HubInfo,
    LedgerMetadata,
    LedgerRanges,
    TopicClaim,
    Version,
    Versioned,
)
from hedwig.metadata.topic_call import TopicCall
from hedwig.metadata.topic_logs import first_ranges


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
        self.watches = PrefixWatch(etcd.watches, keys.family("owners"), etcd.watch_from)
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
            return await put_beside_topic(
                self._etcd, topic, topic_key, key, owner.to_json(), version, lease
            )
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
                config=config_of(config),
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
