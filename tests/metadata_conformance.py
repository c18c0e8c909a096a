"""The conformance suite every metadata store must pass.

A store implementation gets its own test module that subclasses ``MetadataConformance`` and
provides the ``store`` and ``other`` fixtures (two clients of the same region, so sessions and
ownership can be tested from two hubs' points of view). See ``test_metadata_zookeeper.py`` and
``test_metadata_memory.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools

import pytest
from msgspec.structs import replace

from hedwig.errors import (
    BadVersionError,
    MetadataError,
    NoSuchSubscriptionError,
    NoTopicOwnerInfoError,
    NoTopicPersistenceInfoError,
    SubscriptionExistsError,
)
from hedwig.metadata import (
    ANY_VERSION,
    NEW_VERSION,
    DeliveryPolicy,
    HubInfo,
    HubLoad,
    LedgerMetadata,
    LedgerRange,
    LedgerRanges,
    LedgerState,
    MetadataStore,
    PlanMode,
    ReplicationConfig,
    SessionState,
    SubscriptionData,
    SubscriptionPreferences,
    SubscriptionState,
    SubscriptionType,
    TopicConfig,
    TopicLoad,
    TopicPlan,
    Version,
    Versioned,
)
from hedwig.metadata.acls import AclEntry, AclRule, Operation
from hedwig.metadata.plans import Lane

ODD_NAMES = ["plain", "a/b", "../x", ".", "..", "spaced name", "ünïcødé/🚀", "%2F", "x" * 255]


def _set_ignoring_topic(event: asyncio.Event, _topic: str) -> None:
    event.set()


async def log_started(
    other: MetadataStore,
    topic: str,
    md: LedgerMetadata,
    created: Versioned[LedgerMetadata],
    version: Version,
) -> tuple[int, Versioned[LedgerRanges]]:
    """A log started with ``md`` as another store reads it: the ledger (its id given by the
    store) and the record naming it from sequence 1, at the versions told; its id and record."""
    lid = created.value.ledger_id
    assert created.value == replace(md, ledger_id=lid)
    got = await other.ledgers.read_ledger(lid)
    assert got is not None and got.value == created.value and got.version == created.version
    ranges = await other.persistence.read_topic_persistence_info(topic)
    assert ranges is not None and ranges.version == version
    assert ranges.value == LedgerRanges((LedgerRange(lid, 1),))
    return lid, ranges


class MetadataConformance:
    # Whether a claim reads what it can in its own request (a transaction's branches: etcd,
    # and memory as it); a ZooKeeper ``multi`` cannot read.
    claims_read = True

    # ownership ---------------------------------------------------------------------------

    async def test_claim_is_test_and_set(self, store: MetadataStore, other: MetadataStore) -> None:
        await store.topics.ensure_topic("t")
        assert await store.ownership.read_owner_info("t") is None
        v = await store.ownership.write_owner_info("t", HubInfo("h1:1", 7), NEW_VERSION)
        with pytest.raises(BadVersionError):
            await other.ownership.write_owner_info("t", HubInfo("h2:1", 8), NEW_VERSION)
        got = await other.ownership.read_owner_info("t")
        assert got is not None and got.value == HubInfo("h1:1", 7) and got.version == v

    async def test_owner_cas_update_and_delete(self, store: MetadataStore) -> None:
        await store.topics.ensure_topic("t")
        v0 = await store.ownership.write_owner_info("t", HubInfo("h1:1", 1), NEW_VERSION)
        v1 = await store.ownership.write_owner_info("t", HubInfo("h1:1", 2), v0)
        assert v1 != v0
        with pytest.raises(BadVersionError):
            await store.ownership.write_owner_info("t", HubInfo("h1:1", 3), v0)
        with pytest.raises(BadVersionError):
            await store.ownership.delete_owner_info("t", v0)
        await store.ownership.delete_owner_info("t", v1)
        assert await store.ownership.read_owner_info("t") is None
        with pytest.raises(NoTopicOwnerInfoError):
            await store.ownership.delete_owner_info("t", v1)
        with pytest.raises(NoTopicOwnerInfoError):
            await store.ownership.write_owner_info("t", HubInfo("h", 1), v1)

    async def test_a_new_topic_is_created_and_claimed_at_once(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``claim_topic`` creates the topic with its owner record, claims an existing topic
        that has none, or writes nothing and tells whose record is in the way; the record is
        a claim like any other (compare-and-set, and gone with its session or lease, the
        topic staying)."""
        await store.hubs.register_hub("127.0.0.1:9", HubLoad())
        claim = await store.ownership.claim_topic("n/1", HubInfo("127.0.0.1:9", 3))
        v = claim.version
        assert v is not None and claim.new and claim.owner is None
        assert await other.topics.topic_exists("n/1")
        got = await other.ownership.read_owner_info("n/1")
        assert got is not None and got.value == HubInfo("127.0.0.1:9", 3) and got.version == v
        assert await other.topics.read_topic_config("n/1") is not None
        assert await other.subscriptions.read_subscriptions("n/1") == {}
        refused = await other.ownership.claim_topic("n/1", HubInfo("h2:1", 4))
        assert refused.version is None and not refused.new and refused.owner == got
        assert refused.config is None
        with pytest.raises(BadVersionError):
            await other.ownership.write_owner_info("n/1", HubInfo("h2:1", 4), NEW_VERSION)
        # An existing topic with no record: claimed, not created (its configuration kept).
        await other.topics.ensure_topic("n/2")
        await other.topics.write_topic_config("n/2", TopicConfig(retention_ms=60_000), ANY_VERSION)
        taken = await store.ownership.claim_topic("n/2", HubInfo("127.0.0.1:9", 3))
        assert taken.version is not None and not taken.new and taken.owner is None
        mine = await other.ownership.read_owner_info("n/2")
        assert mine == Versioned(HubInfo("127.0.0.1:9", 3), taken.version)
        config = await other.topics.read_topic_config("n/2")
        assert config is not None and config.value.retention_ms == 60_000
        assert taken.config == (config if self.claims_read else None)
        # Its ledger list as of the claim, where the claim reads (none yet: the version that
        # creates one).
        assert taken.ranges == (
            Versioned(LedgerRanges(), NEW_VERSION) if self.claims_read else None
        )
        v1 = await store.ownership.write_owner_info("n/1", HubInfo("127.0.0.1:9", 5), v)
        await store.ownership.delete_owner_info("n/1", v1)
        lost = asyncio.Event()
        await store.ownership.claim_topic("n/3", HubInfo("127.0.0.1:9", 3))
        store.session.add_listener(lambda s: lost.set() if s is SessionState.LOST else None)
        await self.expire(store)
        await asyncio.wait_for(lost.wait(), 30)
        assert await other.ownership.read_owner_info("n/3") is None
        assert await other.topics.topic_exists("n/3")

    async def test_claim_needs_topic(self, store: MetadataStore) -> None:
        with pytest.raises(MetadataError):
            await store.ownership.write_owner_info("missing", HubInfo("h:1", 1), NEW_VERSION)

    async def test_owner_watch_fires_on_delete(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        await store.topics.ensure_topic("w")
        v = await store.ownership.write_owner_info("w", HubInfo("h1:1", 1), NEW_VERSION)
        fired = asyncio.Event()
        told: list[str] = []

        def changed(topic: str) -> None:  # one callback for every topic: told which
            told.append(topic)
            fired.set()

        store.ownership.watch_owner("w", changed)
        await other.ownership.delete_owner_info("w", v)
        await asyncio.wait_for(fired.wait(), 10)
        assert told == ["w"]

    async def test_owner_watch_from_a_version(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """A watch from the version the caller wrote or read through the store fires at the
        next change, not before; one from a version the record has moved past fires at once
        (the change came between the caller's read and its watch)."""
        await store.topics.ensure_topic("wv")
        v1 = await store.ownership.write_owner_info("wv", HubInfo("h1:1", 1), NEW_VERSION)
        current = asyncio.Event()
        store.ownership.watch_owner("wv", functools.partial(_set_ignoring_topic, current), v1)
        await asyncio.sleep(0.3)  # the test: no fire in this window
        assert not current.is_set()
        v2 = await other.ownership.write_owner_info("wv", HubInfo("h2:1", 2), v1)
        await asyncio.wait_for(current.wait(), 10)
        stale = asyncio.Event()
        store.ownership.watch_owner("wv", functools.partial(_set_ignoring_topic, stale), v1)
        await asyncio.wait_for(stale.wait(), 10)
        # From the version as this store reads it: ``v2`` was written through another store,
        # and a store may not have seen that write yet when ``stale`` fires (ZooKeeper's
        # sessions are apart: a watch is set from the latest zxid its session has seen, and
        # one from a version written after it fires at once, "look again").
        seen = await store.ownership.read_owner_info("wv")
        assert seen is not None and seen.version == v2
        later = asyncio.Event()
        store.ownership.watch_owner(
            "wv", functools.partial(_set_ignoring_topic, later), seen.version
        )
        await asyncio.sleep(0.3)  # the test: no fire in this window
        assert not later.is_set()
        await other.ownership.delete_owner_info("wv", v2)
        await asyncio.wait_for(later.wait(), 10)

    # persistence -------------------------------------------------------------------------

    async def test_persistence_cas(self, store: MetadataStore) -> None:
        assert await store.persistence.read_topic_persistence_info("p") is None
        r1 = LedgerRanges((LedgerRange(1, 1, 10), LedgerRange(2, 11)))
        v = await store.persistence.write_topic_persistence_info("p", r1, NEW_VERSION)
        with pytest.raises(BadVersionError):
            await store.persistence.write_topic_persistence_info("p", r1, NEW_VERSION)
        r2 = r1.close_tail(20).with_tail(3, 21)
        v2 = await store.persistence.write_topic_persistence_info("p", r2, v)
        with pytest.raises(BadVersionError):
            await store.persistence.write_topic_persistence_info("p", r1, v)
        got = await store.persistence.read_topic_persistence_info("p")
        assert got is not None and got.value == r2 and got.version == v2
        assert got.value.last_seq == 20
        with pytest.raises(BadVersionError):
            await store.persistence.delete_topic_persistence_info("p", v)
        await store.persistence.delete_topic_persistence_info("p", v2)
        with pytest.raises(NoTopicPersistenceInfoError):
            await store.persistence.delete_topic_persistence_info("p", v2)
        with pytest.raises(NoTopicPersistenceInfoError):
            await store.persistence.write_topic_persistence_info("p", r1, v2)

    # subscriptions -----------------------------------------------------------------------

    async def test_subscription_lifecycle(self, store: MetadataStore) -> None:
        await store.topics.ensure_topic("s")
        data = SubscriptionData(
            SubscriptionPreferences(message_window=10, options=(("a", "b"),)),
            SubscriptionState(consumed_seq=0, created_ms=5),
        )
        v = await store.subscriptions.create_subscription_data("s", "sub1", data)
        with pytest.raises(SubscriptionExistsError):
            await store.subscriptions.create_subscription_data("s", "sub1", data)
        got = await store.subscriptions.read_subscription_data("s", "sub1")
        assert got is not None and got.value == data and got.version == v
        new = SubscriptionData(data.preferences, SubscriptionState(consumed_seq=42, created_ms=5))
        v2 = await store.subscriptions.replace_subscription_data("s", "sub1", new, v)
        with pytest.raises(BadVersionError):
            await store.subscriptions.replace_subscription_data("s", "sub1", data, v)
        subs = await store.subscriptions.read_subscriptions("s")
        assert set(subs) == {"sub1"} and subs["sub1"].value.state == SubscriptionState(42, 5)
        with pytest.raises(BadVersionError):
            await store.subscriptions.delete_subscription_data("s", "sub1", v)
        await store.subscriptions.delete_subscription_data("s", "sub1", v2)
        assert await store.subscriptions.read_subscription_data("s", "sub1") is None
        with pytest.raises(NoSuchSubscriptionError):
            await store.subscriptions.replace_subscription_data("s", "sub1", data, v2)
        with pytest.raises(NoSuchSubscriptionError):
            await store.subscriptions.delete_subscription_data("s", "sub1", v2)
        assert await store.subscriptions.read_subscriptions("nothing-here") == {}

    async def test_partial_update_semantics(self, store: MetadataStore) -> None:
        await store.topics.ensure_topic("pu")
        prefs = SubscriptionPreferences(message_window=3)
        v = await store.subscriptions.create_subscription_data(
            "pu", "s", SubscriptionData(prefs, SubscriptionState(1, 0))
        )
        state_only = SubscriptionData(None, SubscriptionState(9, 0))
        if store.subscriptions.is_partial_update_supported():
            await store.subscriptions.update_subscription_data("pu", "s", state_only, v)
            got = await store.subscriptions.read_subscription_data("pu", "s")
            assert got is not None and got.value.preferences == prefs
            assert got.value.state == SubscriptionState(9, 0)
        else:
            with pytest.raises(MetadataError):
                await store.subscriptions.update_subscription_data("pu", "s", state_only, v)
            whole = SubscriptionData(prefs, SubscriptionState(9, 0))
            await store.subscriptions.update_subscription_data("pu", "s", whole, v)
            got = await store.subscriptions.read_subscription_data("pu", "s")
            assert got is not None and got.value == whole

    async def test_subscription_ack_state_and_policy(self, store: MetadataStore) -> None:
        """A shared subscription's record: its policy, acknowledged ranges above the mark and
        delivery counts, kept as written, and kept by a state-only update where there is one."""
        await store.topics.ensure_topic("q")
        policy = DeliveryPolicy(
            SubscriptionType.SHARED,
            ack_timeout_ms=5_000,
            max_deliveries=3,
            backoff_ms=(100, 1_000),
            dead_letter="q-dlq",
        )
        state = SubscriptionState(
            10, 1, 2, acked=((12, 14), (20, 20)), deliveries=((11, 11, 2), (15, 19, 1))
        )
        data = SubscriptionData(SubscriptionPreferences(message_window=5), state, policy)
        v = await store.subscriptions.create_subscription_data("q", "workers", data)
        got = await store.subscriptions.read_subscription_data("q", "workers")
        assert got is not None and got.value == data and got.value.type is SubscriptionType.SHARED
        moved = SubscriptionState(14, 1, 3, acked=((20, 20),), deliveries=((15, 19, 2),))
        update = (
            SubscriptionData(None, moved)
            if store.subscriptions.is_partial_update_supported()
            else SubscriptionData(data.preferences, moved, policy)
        )
        v = await store.subscriptions.update_subscription_data("q", "workers", update, v)
        got = await store.subscriptions.read_subscription_data("q", "workers")
        assert got is not None and got.value == SubscriptionData(data.preferences, moved, policy)
        # A record written before types (no policy) reads as exclusive.
        await store.subscriptions.create_subscription_data(
            "q", "old", SubscriptionData(SubscriptionPreferences(), SubscriptionState(0, 1))
        )
        old = (await store.subscriptions.read_subscriptions("q"))["old"].value
        assert old.policy is None and old.type is SubscriptionType.EXCLUSIVE

    # ledgers -----------------------------------------------------------------------------

    async def test_ledger_metadata_cas(self, store: MetadataStore) -> None:
        md = LedgerMetadata(0, "t", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        a = await store.ledgers.create_ledger(md)
        b = await store.ledgers.create_ledger(md)
        assert a.value.ledger_id != b.value.ledger_id
        closed = LedgerMetadata(
            a.value.ledger_id, "t", 1, 1, 1, ((0, ("h:1",)),), LedgerState.CLOSED, 5, 12
        )
        v = await store.ledgers.write_ledger(closed, a.version)
        with pytest.raises(BadVersionError):
            await store.ledgers.write_ledger(closed, a.version)
        got = await store.ledgers.read_ledger(a.value.ledger_id)
        assert got is not None and got.value == closed and got.version == v
        assert {a.value.ledger_id, b.value.ledger_id} <= set(await store.ledgers.list_ledgers())
        await store.ledgers.delete_ledger(a.value.ledger_id, v)
        assert await store.ledgers.read_ledger(a.value.ledger_id) is None

    async def test_a_topic_log_starts_with_its_first_ledger_and_record_at_once(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``start_topic_log``: the first ledger (its id given by the store) and the record
        naming it from sequence 1, both there; a second start (the topic has a record) is a
        conflict that leaves no ledger behind."""
        await store.topics.ensure_topic("s")
        md = LedgerMetadata(0, "s", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        created, version = await store.persistence.start_topic_log("s", md)
        lid, ranges = await log_started(other, "s", md, created, version)
        before = set(await store.ledgers.list_ledgers())
        with pytest.raises(BadVersionError):
            await other.persistence.start_topic_log("s", md)
        assert set(await store.ledgers.list_ledgers()) == before
        # The record is an ordinary one: appended to by compare-and-set from its version.
        wider = ranges.value.with_tail(lid + 1000, 5)
        await store.persistence.write_topic_persistence_info("s", wider, version)

    async def test_a_topic_made_with_its_log_in_one_request(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``create_topic_with_log``: a topic that does not exist is made with its first
        ledger and the record naming it, as ``ensure_topic`` and ``start_topic_log`` make
        them; one that exists gets nothing (``None``) and no ledger is left behind."""
        md = LedgerMetadata(0, "w", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        started = await store.persistence.create_topic_with_log("w", md)
        assert started is not None
        await log_started(other, "w", md, *started)
        assert await other.topics.topic_exists("w")
        assert "w" in await other.topics.list_topics()
        assert await other.subscriptions.read_subscriptions("w") == {}
        before = set(await store.ledgers.list_ledgers())
        assert await other.persistence.create_topic_with_log("w", md) is None
        await store.topics.ensure_topic("x")
        assert await other.persistence.create_topic_with_log("x", md) is None
        assert set(await store.ledgers.list_ledgers()) == before
        assert await other.persistence.read_topic_persistence_info("x") is None

    async def test_a_claim_that_creates_its_topic_starts_its_log_too(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``claim_topic`` given a first ledger: a topic it creates has that ledger (its id
        given by the store) and the record naming it from sequence 1, as ``start_topic_log``
        makes them, in the claim's request; a topic that exists (owned or not) gets neither,
        and the claim is as without one. A persistence record in the way of a new topic (left
        by a deletion cut short) fails neither the claim nor leaves a ledger named by none."""
        mine = HubInfo("127.0.0.1:9", 3)
        md = LedgerMetadata(0, "f", 1, 1, 1, ((0, ("h:1",)),), owner="127.0.0.1:9", owner_epoch=3)
        claim = await store.ownership.claim_topic("f/1", mine, replace(md, topic="f/1"))
        assert claim.version is not None and claim.new and claim.log is not None
        created, version = claim.log
        lid = created.value.ledger_id
        assert created.value == replace(md, topic="f/1", ledger_id=lid)
        got = await other.ledgers.read_ledger(lid)
        assert got is not None and got.value == created.value and got.version == created.version
        ranges = await other.persistence.read_topic_persistence_info("f/1")
        assert ranges is not None and ranges.version == version
        assert ranges.value == LedgerRanges((LedgerRange(lid, 1),))
        owner = await other.ownership.read_owner_info("f/1")
        assert owner == Versioned(mine, claim.version)
        # The record is an ordinary one: appended to by compare-and-set from its version.
        await store.persistence.write_topic_persistence_info(
            "f/1", ranges.value.with_tail(lid + 1000, 5), version
        )
        before = set(await store.ledgers.list_ledgers())
        refused = await other.ownership.claim_topic(
            "f/1", HubInfo("h2:1", 4), replace(md, topic="f/1")
        )
        assert refused.version is None and refused.log is None and refused.owner == owner
        await other.topics.ensure_topic("f/2")
        taken = await store.ownership.claim_topic("f/2", mine, replace(md, topic="f/2"))
        assert taken.version is not None and not taken.new and taken.log is None
        assert await other.persistence.read_topic_persistence_info("f/2") is None
        # An existing topic with a log, claimed again: its ledger list read with the claim is
        # the record as it is, with the version its compare-and-set needs.
        await store.ownership.delete_owner_info("f/1", claim.version)
        again = await store.ownership.claim_topic("f/1", mine)
        assert again.version is not None and not again.new
        now = await other.persistence.read_topic_persistence_info("f/1")
        assert now is not None and now.value.ranges[-1].ledger_id == lid + 1000
        assert again.ranges == (now if self.claims_read else None)
        assert set(await store.ledgers.list_ledgers()) == before
        # No topic, but its persistence record left behind: claimed and created; the log is
        # the claimer's to start (the record in the way is its business, as before).
        await other.topics.ensure_topic("f/3")
        await other.persistence.write_topic_persistence_info(
            "f/3", LedgerRanges((LedgerRange(lid, 1),)), NEW_VERSION
        )
        await other.topics.delete_topic("f/3")
        if await other.persistence.read_topic_persistence_info("f/3") is not None:
            left = await store.ownership.claim_topic("f/3", mine, replace(md, topic="f/3"))
            assert left.version is not None and left.log is None
            assert set(await store.ledgers.list_ledgers()) == before

    async def test_a_taken_over_log_moves_on_in_one_step_or_not_at_all(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``continue_topic_log``: the recovered ledger closed at its version, the next one
        created and the record naming it from the sequence after the last, all visible to
        another process; a stale version of any of them is a conflict that writes nothing."""
        await store.topics.ensure_topic("c")
        md = LedgerMetadata(0, "c", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        first, version = await store.persistence.start_topic_log("c", md)
        lid = first.value.ledger_id
        marked = replace(first.value, state=LedgerState.IN_RECOVERY)
        marked_at = await other.ledgers.write_ledger(marked, first.version)
        closed = replace(marked, state=LedgerState.CLOSED, last_entry_id=6, last_seq=7)
        ranges = LedgerRanges((LedgerRange(lid, 1, 7),))
        following = replace(md, owner="h:2", owner_epoch=4)

        async def ledgers() -> set[int]:
            return set(await other.ledgers.list_ledgers())

        before = await ledgers()
        # A stale record, or a ledger closed by someone else meanwhile: nothing is written.
        with pytest.raises(BadVersionError):
            await store.persistence.continue_topic_log(
                "c",
                Versioned(ranges, Version(int(version) + 999)),
                [Versioned(closed, marked_at)],
                following,
            )
        with pytest.raises(BadVersionError):
            await store.persistence.continue_topic_log(
                "c", Versioned(ranges, version), [Versioned(closed, first.version)], following
            )
        assert await ledgers() == before
        still = await other.ledgers.read_ledger(lid)
        assert still is not None and still.value.state is LedgerState.IN_RECOVERY
        record = await other.persistence.read_topic_persistence_info("c")
        assert record is not None and record.version == version
        assert record.value == LedgerRanges((LedgerRange(lid, 1),))

        created, moved = await store.persistence.continue_topic_log(
            "c", Versioned(ranges, version), [Versioned(closed, marked_at)], following
        )
        nid = created.value.ledger_id
        assert nid not in before and created.value == replace(following, ledger_id=nid)
        assert moved.value == LedgerRanges((LedgerRange(lid, 1, 7), LedgerRange(nid, 8)))
        got = await other.ledgers.read_ledger(lid)
        assert got is not None and got.value == closed
        got = await other.ledgers.read_ledger(nid)
        assert got is not None and got.value == created.value and got.version == created.version
        record = await other.persistence.read_topic_persistence_info("c")
        assert record is not None and record == moved
        # Both versions returned are the ones to compare-and-set from next.
        await store.ledgers.write_ledger(replace(created.value, last_seq=8), created.version)
        await store.persistence.write_topic_persistence_info(
            "c", moved.value.close_tail(7), moved.version
        )

    async def test_a_ledger_is_left_over_only_once_its_maker_cannot_name_it(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """``left_over``: a ledger the topic's record does not name is left over only if the
        record was written after the ledger was made (its maker's compare-and-set, against a
        version read before, can then only fail)."""
        await store.topics.ensure_topic("lo")
        md = LedgerMetadata(0, "lo", 1, 1, 1, ((0, ("h:1",)),), owner="h:1", owner_epoch=3)
        first, version = await store.persistence.start_topic_log("lo", md)
        named = first.value.ledger_id
        assert not await other.ledgers.left_over(named, "lo")
        # A claim reads the record, makes its ledger, and dies before naming it: the record
        # is as old as ever, so the claim's compare-and-set could still succeed.
        made = (await store.ledgers.create_ledger(md)).value.ledger_id
        assert not await other.ledgers.left_over(made, "lo")
        # Another claim names its own ledger: the first one's write can only fail now.
        later = (await other.ledgers.create_ledger(md)).value.ledger_id
        read = await other.persistence.read_topic_persistence_info("lo")
        assert read is not None and read.version == version
        version = await other.persistence.write_topic_persistence_info(
            "lo", read.value.close_tail(0).with_tail(later, 1), version
        )
        assert await store.ledgers.left_over(made, "lo")
        assert not await store.ledgers.left_over(named, "lo")
        assert not await store.ledgers.left_over(later, "lo")
        with pytest.raises(BadVersionError):  # what the dead claim's write would get
            await store.persistence.write_topic_persistence_info(
                "lo", read.value.with_tail(made, 1), read.version
            )
        # A collection names fewer ledgers: the one it let go is left over until deleted.
        kept = LedgerRanges(
            tuple(
                r
                for r in read.value.close_tail(0).with_tail(later, 1).ranges
                if r.ledger_id != named
            )
        )
        await store.persistence.write_topic_persistence_info("lo", kept, version)
        assert await other.ledgers.left_over(named, "lo")
        # Gone ledgers and topics without a record prove nothing.
        assert not await store.ledgers.left_over(named + 10_000, "lo")
        orphan = (await store.ledgers.create_ledger(replace(md, topic="none"))).value.ledger_id
        assert not await store.ledgers.left_over(orphan, "none")

    # topics ------------------------------------------------------------------------------

    @pytest.mark.parametrize("name", ODD_NAMES)
    async def test_odd_topic_names_round_trip(self, store: MetadataStore, name: str) -> None:
        assert await store.topics.ensure_topic(name)
        assert not await store.topics.ensure_topic(name)  # idempotent, and says so
        assert name in await store.topics.list_topics()
        await store.subscriptions.create_subscription_data(name, name, SubscriptionData())
        assert set(await store.subscriptions.read_subscriptions(name)) == {name}
        await store.ownership.write_owner_info(name, HubInfo("h:1", 1), NEW_VERSION)
        got = await store.ownership.read_owner_info(name)
        assert got is not None
        await store.topics.delete_topic(name)
        assert name not in await store.topics.list_topics()

    async def test_topic_config(self, store: MetadataStore) -> None:
        cfg = TopicConfig(ReplicationConfig(3, 3, 2), retention_ms=1000, max_message_size=10)
        v = await store.topics.write_topic_config("cfg", cfg, NEW_VERSION)
        got = await store.topics.read_topic_config("cfg")
        assert got is not None and got.value == cfg
        with pytest.raises(BadVersionError):
            await store.topics.write_topic_config("cfg", TopicConfig(), Version(v + 5))
        defaults = TopicConfig(retention_ms=5)
        await store.topics.write_region_defaults(defaults)
        assert await store.topics.read_region_defaults() == defaults

    # hubs and sessions -------------------------------------------------------------------

    async def test_hub_registry(self, store: MetadataStore, other: MetadataStore) -> None:
        load = HubLoad(timestamp_ms=1, topics=2, topic_loads={"a/b": TopicLoad(msg_in=1.5)})
        e1 = await store.hubs.register_hub("127.0.0.1:1", load)
        e2 = await other.hubs.register_hub("127.0.0.1:2", HubLoad())
        assert e1 != e2
        hubs = {h.address: h for h in await other.hubs.list_hubs()}
        assert hubs["127.0.0.1:1"].alive and hubs["127.0.0.1:1"].load == load
        assert hubs["127.0.0.1:1"].epoch == e1
        await store.hubs.update_load("127.0.0.1:1", HubLoad(topics=9))
        hubs = {h.address: h for h in await other.hubs.list_hubs()}
        assert hubs["127.0.0.1:1"].load == HubLoad(topics=9)
        # A load report keeps the epoch: other hubs answer HUB_ALIVE by it.
        assert hubs["127.0.0.1:1"].epoch == e1
        assert await other.hubs.alive_epoch("127.0.0.1:1") == e1
        assert await other.hubs.alive_epoch("127.0.0.1:3") is None
        await store.hubs.unregister_hub("127.0.0.1:1")
        hubs = {h.address: h for h in await other.hubs.list_hubs()}
        assert not hubs["127.0.0.1:1"].alive and hubs["127.0.0.1:2"].alive
        assert await other.hubs.alive_epoch("127.0.0.1:1") is None

    async def test_session_loss_drops_ephemeral_records(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        await store.topics.ensure_topic("e")
        await store.hubs.register_hub("127.0.0.1:9", HubLoad())
        await store.ownership.write_owner_info("e", HubInfo("127.0.0.1:9", 1), NEW_VERSION)
        lost = asyncio.Event()
        store.session.add_listener(lambda s: lost.set() if s is SessionState.LOST else None)
        await self.expire(store)
        await asyncio.wait_for(lost.wait(), 30)
        assert await other.ownership.read_owner_info("e") is None
        hubs = {h.address: h for h in await other.hubs.list_hubs()}
        assert not hubs["127.0.0.1:9"].alive
        # the topic and its subscribers are persistent
        assert await other.topics.topic_exists("e")

    async def test_acl_entries_cas_and_watch(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        rule = AclRule("alice", frozenset({Operation.PUBLISH}), name="t")
        entry = AclEntry((rule,), source="test")
        fired = asyncio.Event()
        assert await other.acls.list_acls(watch=fired.set) == {}
        v = await store.acls.write_acl("ns/alice", entry, NEW_VERSION)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await store.acls.write_acl("ns/alice", entry, NEW_VERSION)
        got = await other.acls.read_acl("ns/alice")
        assert got is not None and got.value == entry and got.version == v
        fired.clear()
        listed = await other.acls.list_acls(watch=fired.set)
        assert {n: e.value for n, e in listed.items()} == {"ns/alice": entry}
        changed = AclEntry((rule, dataclasses.replace(rule, name="u")), source="test")
        v2 = await store.acls.write_acl("ns/alice", changed, v)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await store.acls.write_acl("ns/alice", entry, v)
        fired.clear()
        await other.acls.list_acls(watch=fired.set)
        await store.acls.delete_acl("ns/alice", v2)
        await asyncio.wait_for(fired.wait(), 10)
        assert await other.acls.list_acls() == {}
        with pytest.raises(MetadataError):
            await store.acls.delete_acl("ns/alice", ANY_VERSION)

    # plans ------------------------------------------------------------------------------------

    async def test_plan_cas_and_watch(self, store: MetadataStore, other: MetadataStore) -> None:
        """A plan is created, changed and removed only by compare-and-set, and a watch set by
        a read that found nothing fires when it is created."""
        with pytest.raises(MetadataError):
            await store.plans.write_plan("nope", TopicPlan(), NEW_VERSION)
        await store.topics.ensure_topic("a/b")
        fired = asyncio.Event()
        assert await other.plans.read_plan("a/b", watch=fired.set) is None
        plan = TopicPlan.fan_out(["h2:1", "h1:1"], generation=1, reason="test")
        v = await store.plans.write_plan("a/b", plan, NEW_VERSION)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await other.plans.write_plan("a/b", plan, NEW_VERSION)
        fired.clear()
        got = await other.plans.read_plan("a/b", watch=fired.set)
        assert got is not None and got.value == plan and got.version == v
        assert got.value.hubs == ("h1:1", "h2:1") and got.value.mode is PlanMode.FAN_OUT
        wider = TopicPlan.fan_out(["h1:1", "h2:1", "h3:1"], generation=2)
        v2 = await store.plans.write_plan("a/b", wider, v)
        await asyncio.wait_for(fired.wait(), 10)
        with pytest.raises(BadVersionError):
            await other.plans.write_plan("a/b", plan, v)  # lost the race: nothing written
        with pytest.raises(BadVersionError):
            await other.plans.delete_plan("a/b", v)
        fired.clear()
        assert await other.plans.read_plan("a/b", watch=fired.set) is not None
        await store.plans.delete_plan("a/b", v2)
        await asyncio.wait_for(fired.wait(), 10)
        assert await other.plans.read_plan("a/b") is None
        with pytest.raises(MetadataError):
            await store.plans.delete_plan("a/b", ANY_VERSION)
        with pytest.raises(MetadataError):
            await store.plans.write_plan("a/b", plan, v2)  # updating a plan that is gone

    async def test_planned_topics_and_their_watch(
        self, store: MetadataStore, other: MetadataStore
    ) -> None:
        """The set of topics with a plan, and a watch that fires when a plan is created, is
        deleted, or goes with its topic (what a hub reads instead of a plan per topic)."""
        for t in ("p/1", "p/2", "bare"):
            await store.topics.ensure_topic(t)
        fired = asyncio.Event()
        assert await other.plans.planned_topics(watch=fired.set) == frozenset()
        v1 = await store.plans.write_plan(
            "p/1", TopicPlan.fan_out(["h:1"], generation=1), NEW_VERSION
        )
        await asyncio.wait_for(fired.wait(), 10)
        fired.clear()
        assert await other.plans.planned_topics(watch=fired.set) == {"p/1"}
        ingest = TopicPlan(PlanMode.INGEST, generation=1, lanes=(Lane(0), Lane(1)))
        await store.plans.write_plan("p/2", ingest, ANY_VERSION)
        await asyncio.wait_for(fired.wait(), 10)
        fired.clear()
        assert await other.plans.planned_topics(watch=fired.set) == {"p/1", "p/2"}
        await store.plans.delete_plan("p/1", v1)
        await asyncio.wait_for(fired.wait(), 10)
        fired.clear()
        assert await other.plans.planned_topics(watch=fired.set) == {"p/2"}
        await store.topics.delete_topic("p/2")
        await asyncio.wait_for(fired.wait(), 10)
        assert await other.plans.planned_topics() == frozenset()
        # A topic created again after its deletion has no plan, and a plan can be set again.
        await store.topics.ensure_topic("p/2")
        assert await other.plans.read_plan("p/2") is None
        await store.plans.write_plan("p/2", ingest, NEW_VERSION)
        assert await other.plans.planned_topics() == {"p/2"}

    async def test_plan_goes_with_its_topic(self, store: MetadataStore) -> None:
        await store.topics.ensure_topic("p")
        await store.plans.write_plan("p", TopicPlan.fan_out(["h:1"], generation=1), NEW_VERSION)
        fired = asyncio.Event()
        assert await store.plans.read_plan("p", watch=fired.set) is not None
        await store.topics.delete_topic("p")
        await asyncio.wait_for(fired.wait(), 10)
        assert await store.plans.read_plan("p") is None

    async def expire(self, store: MetadataStore) -> None:
        raise NotImplementedError
