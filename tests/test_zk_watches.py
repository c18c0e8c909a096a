"""Watches of the ZooKeeper client (``hedwig.metadata.zookeeper.client.watches``): the record
kept small, one watch per owned topic filed by its topic, and on a real ZooKeeper the same
watches fire, once, on a change or a deletion; those of a turn go in one ``SetWatches``;
none is missed when a connection goes, none fires for it, and every one fires when the
session expires."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata.zookeeper.client import Phase, ZkClient
from hedwig.metadata.zookeeper.client.codes import EventType
from hedwig.metadata.zookeeper.client.connection import Answer
from hedwig.metadata.zookeeper.client.records import Request, WatcherEvent
from hedwig.metadata.zookeeper.client.watches import MAX_WATCHES, Kind, OneShot, WatchRecord, fire
from tests.waiting import until


def test_a_path_keeps_each_watcher_once_in_a_slot_or_a_set() -> None:
    def a(_e: WatcherEvent | None) -> None: ...
    def b(_e: WatcherEvent | None) -> None: ...

    record = WatchRecord()
    record.add(Kind.DATA, "/x", a)
    record.add(Kind.DATA, "/x", a)  # once, as a set would keep it
    assert record.watching("/x") == [a] and record.keys() == ["/x"]
    record.add(Kind.DATA, "/x", b)
    record.add(Kind.DATA, "/x", b)
    assert record.watching("/x") == [a, b]
    record.add(Kind.CHILD, "/x", a)  # another kind: apart
    assert record.watching("/x", Kind.CHILD) == [a] and len(record) == 2
    record.discard(Kind.DATA, "/x", a)
    assert record.watching("/x") == [b]
    assert record.pop(Kind.DATA, "/x") == [b] and record.pop(Kind.DATA, "/x") == []
    assert len(record) == 1 and record.clear() == [a] and len(record) == 0


def test_a_notification_fires_the_watchers_its_kind_concerns() -> None:
    """As ZooKeeper's own client: a change fires data and exist watchers, a new child the
    child watchers, a deletion all three."""
    fired: list[str] = []
    record = WatchRecord()

    def watcher(name: str) -> OneShot:
        return OneShot(functools.partial(fired.append, name))

    for kind in Kind:
        record.add(kind, "/n", watcher(kind.value))
    fire(record.fired(WatcherEvent(EventType.CHILDREN_CHANGED, 3, "/n")))
    assert fired == ["child"]
    fire(record.fired(WatcherEvent(EventType.DATA_CHANGED, 3, "/n")))
    assert sorted(fired) == ["child", "data", "exist"] and len(record) == 0
    for kind in Kind:
        record.add(kind, "/m", watcher(f"m-{kind.value}"))
    fire(record.fired(WatcherEvent(EventType.DELETED, 3, "/m")))
    assert sorted(fired[3:]) == ["m-child", "m-data", "m-exist"] and len(record) == 0


def test_an_owner_watch_is_filed_by_its_topic_not_a_path_of_its_own() -> None:
    record = WatchRecord()
    record.file_by_end("/r/topics/", "/hub")
    topic = "t-0000001"
    mine, stray, other = OneShot(print, topic, topic), OneShot(print, 1, "no"), OneShot(print)
    record.add(Kind.DATA, "/r/topics/t-0000001/hub", mine)
    assert record.keys() == [topic] and record.keys()[0] is topic  # the holder's own string
    record.add(Kind.DATA, "/r/topics/t-0000001/hub", stray)  # a key that is not the path's
    other.key = topic
    record.add(Kind.DATA, "/r/topics/t-0000001/plan", other)  # not of the kind: by path
    record.add(Kind.DATA, "/r/topics/a/b/hub", OneShot(print, 1, "a/b"))  # no topic's end
    assert sorted(record.keys()) == sorted(
        [topic, "/r/topics/t-0000001/hub", "/r/topics/t-0000001/plan", "/r/topics/a/b/hub"]
    )
    assert sorted(record.paths(Kind.DATA)) == sorted(
        ["/r/topics/t-0000001/hub"] * 2 + ["/r/topics/t-0000001/plan", "/r/topics/a/b/hub"]
    )
    assert record.pop(Kind.DATA, "/r/topics/t-0000001/hub") == [stray, mine]
    assert record.watching("/r/topics/t-0000001/plan") == [other]
    # What it saves per owned topic: a copy of the record's path.
    assert sys.getsizeof("/r/topics/t-0000001/hub") > 70


async def test_watches_fire_once_on_a_change_or_a_deletion_and_outlive_a_lost_connection(
    tmp_path: Path,
) -> None:
    """Each watch fires once, at its znode's change or deletion, and never for a lost
    connection: kept while ZooKeeper is away, set again when it is back (the session lives,
    30 s), they fire at the next change as before. (kazoo, the client before, fired every
    watch at each lost connection; each holder then read again for nothing, a hub its every
    owned topic.)"""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    zk = ZkClient(server.address, session_timeout=30.0)
    zk.file_watches_by_end("/w/topics/", "/hub")
    fired: Counter[str] = Counter()
    try:
        await zk.start()
        paths = [f"/w/{n}" for n in ("changed", "deleted", "kept", "twice")]
        for path in paths:
            await zk.create(path, b"v", makepath=True)
            zk.watch(path, functools.partial(fired.update, [path]), 0)
        zk.watch("/w/twice", lambda: fired.update(["/w/twice"]), 0)

        def told(topic: str) -> None:  # one callback for the owner records, told which
            fired.update([topic])

        for topic in ("o-changed", "o-kept"):
            path = f"/w/topics/{topic}/hub"
            await zk.create(path, b"v", makepath=True)
            zk.watch_with(path, told, topic, 0, key=topic)
        record = zk.watches.record
        await until(lambda: len(record) == len(paths) + 2)
        assert len(record.watching("/w/twice")) == 2
        assert {"o-changed", "o-kept"} <= set(record.keys())
        await zk.set("/w/changed", b"w", 0)
        await zk.delete("/w/deleted", 0)
        await zk.set("/w/topics/o-changed/hub", b"w", 0)
        await until(lambda: len(fired) == 3)
        assert fired == {"/w/changed": 1, "/w/deleted": 1, "o-changed": 1}
        # ZooKeeper goes and comes back: nothing fires for it.
        await asyncio.to_thread(server.kill)
        await until(lambda: zk.phase is Phase.SUSPENDED)
        await asyncio.sleep(0.5)  # the test: ZooKeeper away a while
        await asyncio.to_thread(server.start)
        await until(lambda: zk.phase is Phase.CONNECTED, 30)
        await asyncio.sleep(0.3)  # the test: no fire for the lost connection in this window
        assert sum(fired.values()) == 3 and len(record) == 3
        await zk.set("/w/kept", b"w", 0)
        await zk.set("/w/twice", b"w", 0)
        await zk.delete("/w/topics/o-kept/hub", 0)
        await until(lambda: len(fired) == 6)
        await asyncio.sleep(0.3)  # the test: no second fire in this window
        assert fired == {
            "/w/changed": 1,
            "/w/deleted": 1,
            "/w/kept": 1,
            "/w/twice": 2,
            "o-changed": 1,
            "o-kept": 1,
        }
        assert len(record) == 0
    finally:
        try:
            await zk.close()
        finally:
            server.stop()  # even if closing failed: no server is left behind


async def test_every_watch_fires_once_when_the_session_expires(
    zk_server: ZooKeeperServer,
) -> None:
    """Expired, the session's watches are gone on the server: each watcher fires (its holder
    reads again, on the new session) and none is left in the record."""
    zk = ZkClient(zk_server.address, session_timeout=4.0)
    fired: Counter[str] = Counter()
    try:
        await zk.start()
        await zk.ensure_path("/expiring")
        zk.watch("/expiring", functools.partial(fired.update, ["data"]))
        await zk.exists_watched("/expiring/none", zk.one_shot(lambda: fired.update(["exist"])))
        await zk.children_watched("/expiring", zk.one_shot(lambda: fired.update(["child"])))
        await until(
            lambda: len(zk.watches.record) == 3 and zk.in_flight == 0, what="the watches set"
        )
        twin = ZkClient(
            zk_server.address, session_timeout=4.0, session=(zk.session_id, zk.session_password)
        )
        await twin.start(timeout=10)
        await twin.close()
        await until(lambda: len(fired) == 3, 30)
        await until(lambda: zk.phase is Phase.CONNECTED, 30)
        assert fired == {"data": 1, "exist": 1, "child": 1} and len(zk.watches.record) == 0
    finally:
        await zk.close()


@contextlib.asynccontextmanager
async def two_sessions(tmp_path: Path) -> AsyncIterator[tuple[ZkClient, ZkClient]]:
    """A ZooKeeper server of its own and two sessions on it (a store's, another's); after the
    body, both closed and the server stopped (even if closing failed)."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    zk = ZkClient(server.address, session_timeout=30.0)
    other = ZkClient(server.address, session_timeout=30.0)
    try:
        await zk.start()
        await other.start()
        yield zk, other
    finally:
        try:
            await zk.close()
            await other.close()
        finally:
            server.stop()


async def test_watches_of_a_turn_go_together_and_a_change_before_them_fires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watches set in one turn of the loop go to ZooKeeper in one ``SetWatches`` each
    ``MAX_WATCHES``, with no ``exists`` per path; those that expect a version are read back,
    so a change the server cannot tell (made before the latest zxid this client had seen)
    fires its watcher at once, and only that one; later changes fire as they come."""
    fired: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    async with two_sessions(tmp_path) as (zk, other):
        count = MAX_WATCHES + 88
        paths = [f"/g/n{i}" for i in range(count)]
        await zk.create("/g", b"")
        await asyncio.gather(*(zk.create(p, b"v") for p in paths))
        await other.set(paths[7], b"w", 0)  # now at version 1
        # This client has seen a zxid past that change: the server cannot fire for it.
        _, later = await zk.get(paths[7])
        assert zk.last_zxid >= later.mzxid
        connection = zk.connection
        assert connection is not None
        real = connection.send

        def counting(request: Request, answer: Answer, *, flush: bool = True) -> None:
            sent[type(request).__name__] += 1
            real(request, answer, flush=flush)

        monkeypatch.setattr(connection, "send", counting)
        for path in paths:
            zk.watch(path, functools.partial(fired.update, [path]), 0)
        zk.watch("/g/never", functools.partial(fired.update, ["/g/never"]))
        await until(lambda: len(fired) == 2)
        await asyncio.sleep(0.2)  # the test: no other fire, no other request in this window
        assert fired == {paths[7]: 1, "/g/never": 1}
        assert sent == {"SetWatchesRequest": 2, "MultiReadRequest": 2}
        record = zk.watches.record
        assert all(record.watching(p) for p in paths if p != paths[7])

        await other.delete(paths[0], 0)
        await other.set(paths[-1], b"w", 0)
        await until(lambda: len(fired) == 4)
        assert fired == {paths[7]: 1, "/g/never": 1, paths[0]: 1, paths[-1]: 1}
        assert not record.watching(paths[0]) and not record.watching(paths[-1])
        assert all(record.watching(p) for p in paths[1:-1] if p != paths[7])
        assert zk.phase is Phase.CONNECTED


async def test_a_watch_from_a_version_waits_once_its_session_has_seen_that_version(
    tmp_path: Path,
) -> None:
    """A ``SetWatches`` gives the latest zxid this session's answers carried. A version
    another session wrote after it fires the watch at once (the server: changed since), even
    though the record is at that version; once this session has read the record, a watch
    from the same version waits for the next change. (The conformance suite's watch from a
    version another store wrote reads it through its own store first for this reason.)"""
    async with two_sessions(tmp_path) as (zk, other):
        await zk.create("/w", b"a")
        written = await other.set("/w", b"b", 0)
        assert zk.last_zxid < written.mzxid  # not seen here
        early = asyncio.Event()
        zk.watch("/w", early.set, written.version)
        await asyncio.wait_for(early.wait(), 10)

        _, seen = await zk.get("/w")
        assert seen.version == written.version and zk.last_zxid >= seen.mzxid
        later = asyncio.Event()
        zk.watch("/w", later.set, seen.version)
        await asyncio.sleep(0.3)  # the test: no fire in this window
        assert not later.is_set()
        await other.set("/w", b"c", seen.version)
        await asyncio.wait_for(later.wait(), 10)
        assert zk.phase is Phase.CONNECTED


@pytest.mark.parametrize("lost_at", ["SetWatchesRequest", "MultiReadRequest"])
async def test_watches_in_flight_when_the_connection_goes_miss_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost_at: str
) -> None:
    """ZooKeeper goes as a turn's watches are being set (``SetWatches`` on its way) or read
    back (the ``multiRead`` on its way), and comes back within the session. Each watcher
    fires once in all, when its record changes after it is back: the watches are set again
    on the next connection and the read-backs made there; the read-back's slot is given
    back."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    zk = ZkClient(server.address, session_timeout=30.0)
    fired: Counter[str] = Counter()
    try:
        await zk.start()
        paths = [f"/f/n{i}" for i in range(40)]
        await zk.create("/f", b"")
        await asyncio.gather(*(zk.create(p, b"v") for p in paths))
        connection = zk.connection
        assert connection is not None
        real = connection.send
        seen: Counter[str] = Counter()

        def losing(request: Request, answer: Answer, *, flush: bool = True) -> None:
            kind = type(request).__name__
            seen[kind] += 1
            if kind == lost_at and seen[kind] == 1:
                server.kill()  # gone before the request is written, or as it is
            real(request, answer, flush=flush)

        monkeypatch.setattr(connection, "send", losing)
        for path in paths:
            zk.watch(path, functools.partial(fired.update, [path]), 0)
        await until(
            lambda: seen[lost_at] == 1 and zk.phase is Phase.SUSPENDED, what="the connection lost"
        )
        assert seen[lost_at] == 1
        assert not fired
        await asyncio.to_thread(server.start)  # the same port and data: the session lives
        await until(lambda: zk.phase is Phase.CONNECTED and zk.in_flight == 0, 40)
        record = zk.watches.record
        await until(lambda: all(record.watching(p) for p in paths))
        assert not fired
        await asyncio.gather(*(zk.set(p, b"w", 0) for p in paths))
        await until(lambda: len(fired) == len(paths))
        await asyncio.sleep(0.3)  # the test: no second fire in this window
        assert fired == dict.fromkeys(paths, 1)
        assert len(record) == 0 and zk.in_flight == 0
    finally:
        try:
            await zk.close()
        finally:
            server.stop()
