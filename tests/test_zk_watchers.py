"""kazoo's record of data watches kept small (``hedwig.metadata.zookeeper.watchers``): the same
watches fire, on a change, a deletion and a lost connection, on a real ZooKeeper."""

from __future__ import annotations

import asyncio
import functools
import sys
from collections import Counter
from pathlib import Path

from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata.zookeeper.bridge import ZkBridge
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
    assert list(record.pop("/x", [])) == [a] and list(record.pop("/x", [])) == []
    # What it saves: one watch of each owned topic's record.
    one = Watchers()
    one.add(a)
    assert sys.getsizeof(one) < sys.getsizeof({a}) / 3


async def test_watches_fire_once_on_a_change_a_deletion_or_a_lost_connection(
    tmp_path: Path,
) -> None:
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk")).start()
    bridge = ZkBridge(server.address, session_timeout=30.0)
    fired: Counter[str] = Counter()
    try:
        await bridge.start()
        paths = [f"/w/{n}" for n in ("changed", "deleted", "kept", "twice")]
        for path in paths:
            await bridge.create(path, b"v", makepath=True)
            bridge.watch(path, functools.partial(fired.update, [path]), 0)
        bridge.watch("/w/twice", lambda: fired.update(["/w/twice"]), 0)
        for _ in range(100):
            if len(bridge._client._data_watchers) == len(paths):
                break
            await asyncio.sleep(0.02)
        record = bridge._client._data_watchers
        assert isinstance(record, WatcherRecord) and len(record["/w/twice"]) == 2
        await bridge.set("/w/changed", b"w", 0)
        await bridge.delete("/w/deleted", 0)
        for _ in range(100):
            if len(fired) == 2:
                break
            await asyncio.sleep(0.02)
        assert fired == {"/w/changed": 1, "/w/deleted": 1}
        # The connection goes: every watch still set fires (its holder looks again), once.
        await asyncio.to_thread(server.kill)
        for _ in range(200):
            if len(fired) == 4:
                break
            await asyncio.sleep(0.05)
        assert fired == {"/w/changed": 1, "/w/deleted": 1, "/w/kept": 1, "/w/twice": 2}
        assert isinstance(bridge._client._data_watchers, WatcherRecord)
        assert not bridge._client._data_watchers
        await asyncio.sleep(0.3)
        assert sum(fired.values()) == 5
    finally:
        await bridge.close()
        server.stop()
