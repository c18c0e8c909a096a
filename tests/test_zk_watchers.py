"""kazoo's record of data watches kept small (``hedwig.metadata.zookeeper.watchers``): the same
watches fire, on a change, a deletion and a lost connection, on a real ZooKeeper."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata.zookeeper.bridge import ZkBridge
from hedwig.metadata.zookeeper.setwatches import MAX_WATCHES
from hedwig.metadata.zookeeper.watchers import WatcherRecord, Watchers


def test_a_path_keeps_each_watcher_once_in_a_slot_or_a_set() -> None:
    def a(_e: object) -> None: ...
    def b(_e: object) -> None: ...

    w = Watchers()
    assert (list(w), len(w)) == ([], 0)
    w.add(a)
    w.add(a)  # kazoo's set kept a function once
    assert (list(w), len(w), w.more) == ([a], 1, None)
    w.add(b)
    w.add(b)
    assert (list(w), len(w)) == ([a, b], 2)
    record = WatcherRecord()
    record["/x"].add(a)
    record["/x"].add(a)
    assert record.watching("/x") == [a] and record.keys() == ["/x"]
    record["/x"].add(b)
    assert sorted(record.pop("/x", []), key=id) == sorted([a, b], key=id)
    assert record.pop("/x", []) == [] and len(record) == 0


def test_an_owner_watch_is_filed_by_its_topic_not_a_path_of_its_own() -> None:
    class Keyed:
        def __init__(self, key: str) -> None:
            self.key = key

        def __call__(self, _e: object) -> None: ...

    record = WatcherRecord("/r/topics/", "/hub")
    topic = "t-0000001"
    mine, stray, other = Keyed(topic), Keyed("not-this-one"), Keyed(topic)
    record["/r/topics/t-0000001/hub"].add(mine)
    assert record.keys() == [topic] and record.keys()[0] is topic  # the holder's own string
    record["/r/topics/t-0000001/hub"].add(stray)  # a key that is not the path's: by path
    record["/r/topics/t-0000001/plan"].add(other)  # not of the kind: by path
    record["/r/topics/a/b/hub"].add(Keyed("a/b"))  # an end with a slash is no topic's
    assert sorted(record.keys()) == sorted(
        [topic, "/r/topics/t-0000001/hub", "/r/topics/t-0000001/plan", "/r/topics/a/b/hub"]
    )
    assert record.pop("/r/topics/t-0000001/hub", []) == [mine, stray]
    assert record.watching("/r/topics/t-0000001/plan") == [other]
    # What it saves per owned topic: the set of one and kazoo's copy of the path.
    assert sys.getsizeof({mine}) + sys.getsizeof("/r/topics/t-0000001/hub") > 250


async def test_watches_fire_once_on_a_change_a_deletion_or_a_lost_connection(
    tmp_path: Path,
) -> None:
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    bridge = ZkBridge(server.address, session_timeout=30.0)
    bridge.file_watches_by_end("/w/topics/", "/hub")
    fired: Counter[str] = Counter()
    try:
        await bridge.start()
        paths = [f"/w/{n}" for n in ("changed", "deleted", "kept", "twice")]
        for path in paths:
            await bridge.create(path, b"v", makepath=True)
            bridge.watch(path, functools.partial(fired.update, [path]), 0)
        bridge.watch("/w/twice", lambda: fired.update(["/w/twice"]), 0)

        # Owner records' watches, filed by their topics, one callback told which: one
        # changed, one kept.
        def told(topic: str) -> None:
            fired.update([topic])

        for topic in ("o-changed", "o-kept"):
            path = f"/w/topics/{topic}/hub"
            await bridge.create(path, b"v", makepath=True)
            bridge.watch_with(path, told, topic, 0, key=topic)
        for _ in range(100):
            if len(bridge._client._data_watchers) == len(paths) + 2:
                break
            await asyncio.sleep(0.02)
        record = bridge._client._data_watchers
        assert isinstance(record, WatcherRecord) and len(record.watching("/w/twice")) == 2
        assert {"o-changed", "o-kept"} <= set(record.keys())
        await bridge.set("/w/changed", b"w", 0)
        await bridge.delete("/w/deleted", 0)
        await bridge.set("/w/topics/o-changed/hub", b"w", 0)
        for _ in range(100):
            if len(fired) == 3:
                break
            await asyncio.sleep(0.02)
        assert fired == {"/w/changed": 1, "/w/deleted": 1, "o-changed": 1}
        # The connection goes: every watch still set fires (its holder looks again), once.
        await asyncio.to_thread(server.kill)
        for _ in range(200):
            if len(fired) == 6:
                break
            await asyncio.sleep(0.05)
        assert fired == {
            "/w/changed": 1,
            "/w/deleted": 1,
            "/w/kept": 1,
            "/w/twice": 2,
            "o-changed": 1,
            "o-kept": 1,
        }
        assert isinstance(bridge._client._data_watchers, WatcherRecord)
        assert len(bridge._client._data_watchers) == 0
        await asyncio.sleep(0.3)
        assert sum(fired.values()) == 7
    finally:
        try:
            await bridge.close()
        finally:
            server.stop()  # even if closing failed: no server is left behind


async def test_watches_of_a_turn_go_together_and_a_change_before_them_fires(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The watches set in one turn of the loop go to ZooKeeper in one ``SetWatches`` each
    ``MAX_WATCHES``, with no ``exists`` per path; those that expect a version are read back,
    so a change the server cannot tell (made before the latest zxid this client had seen)
    fires its watcher at once, and only that one; later changes fire as they come."""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    bridge = ZkBridge(server.address, session_timeout=30.0)
    other = ZkBridge(server.address, session_timeout=30.0)
    fired: Counter[str] = Counter()
    sent: Counter[str] = Counter()
    try:
        await bridge.start()
        await other.start()
        count = MAX_WATCHES + 88
        paths = [f"/g/n{i}" for i in range(count)]
        await bridge.create("/g", b"")
        await asyncio.gather(*(bridge.create(p, b"v") for p in paths))
        await other.set(paths[7], b"w", 0)  # now at version 1
        # This client has seen a zxid past that change: the server cannot fire for it.
        _, later = await bridge.get(paths[7])
        assert bridge._client.last_zxid >= later.mzxid

        calls = bridge._client._call

        def counting(request: Any, answer: Any) -> Any:
            sent[type(request).__name__] += 1
            return calls(request, answer)

        monkeypatch.setattr(bridge._client, "_call", counting)
        for path in paths:
            bridge.watch(path, functools.partial(fired.update, [path]), 0)
        bridge.watch("/g/never", functools.partial(fired.update, ["/g/never"]))
        for _ in range(200):
            if len(fired) == 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        assert fired == {paths[7]: 1, "/g/never": 1}
        assert sent == {"SetWatches": 2, "MultiRead": 2}
        record = bridge._client._data_watchers
        assert all(record.watching(p) for p in paths)

        await other.delete(paths[0], 0)
        await other.set(paths[-1], b"w", 0)
        for _ in range(200):
            if len(fired) == 4:
                break
            await asyncio.sleep(0.02)
        assert fired == {paths[7]: 1, "/g/never": 1, paths[0]: 1, paths[-1]: 1}
        assert not record.watching(paths[0]) and not record.watching(paths[-1])
        assert all(record.watching(p) for p in paths[1:-1])
        assert bridge._client.connected and record is bridge._client._data_watchers
    finally:
        try:
            await bridge.close()
            await other.close()
        finally:
            server.stop()


@pytest.mark.parametrize("lost_at", ["SetWatches", "MultiRead"])
async def test_watches_in_flight_when_the_connection_goes_miss_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lost_at: str
) -> None:
    """ZooKeeper goes as a turn's watches are being set (``SetWatches`` on its way) or read
    back (the ``multiRead`` on its way), and comes back within the session. Each watcher
    fires once in all: as the connection goes (for those set by then), or once set again
    and its record changed; the read-back's slot is given back. (A request kazoo takes after
    it has failed what it held waits for the connection, as any request made then does.)"""
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    bridge = ZkBridge(server.address, session_timeout=30.0)
    fired: Counter[str] = Counter()
    try:
        await bridge.start()
        paths = [f"/f/n{i}" for i in range(40)]
        await bridge.create("/f", b"")
        await asyncio.gather(*(bridge.create(p, b"v") for p in paths))
        calls = bridge._client._call
        seen: Counter[str] = Counter()

        def losing(request: Any, answer: Any) -> Any:
            kind = type(request).__name__
            seen[kind] += 1
            if kind == lost_at and seen[kind] == 1:
                server.kill()  # gone before the request is written, or as it is
            return calls(request, answer)

        monkeypatch.setattr(bridge._client, "_call", losing)
        for path in paths:
            bridge.watch(path, functools.partial(fired.update, [path]), 0)
        await asyncio.sleep(1.0)
        assert seen[lost_at] == 1
        assert all(n == 1 for n in fired.values())
        await asyncio.to_thread(server.start)  # the same port and data: the session lives
        # A reconnection can find the port open before the server answers, and kazoo then
        # waits for the handshake's answer up to the session timeout before trying again.
        for _ in range(800):
            if bridge._client.connected and bridge._slots.used == 0:
                break
            await asyncio.sleep(0.05)
        assert bridge._client.connected and bridge._slots.used == 0
        record = bridge._client._data_watchers
        for _ in range(100):  # the watches still to be set are set, and recorded
            if all(fired[p] or record.watching(p) for p in paths):
                break
            await asyncio.sleep(0.05)
        await asyncio.gather(*(bridge.set(p, b"w", 0) for p in paths))
        for _ in range(200):
            if len(fired) == len(paths):
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        assert fired == dict.fromkeys(paths, 1)
        assert len(record) == 0
    finally:
        try:
            await bridge.close()
        finally:
            server.stop()
