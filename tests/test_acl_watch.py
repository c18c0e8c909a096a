"""The hub's ACL watcher (``hedwig.hub.front.acl_watch``) against the in-memory store: the rules
follow every change through the watch, not the poll, even when a change lands while a read
is still on its way back."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from hedwig.clock import SystemClock
from hedwig.hub.front.acl_watch import AclWatcher
from hedwig.metadata.acls import AclEntry, AclRule, Operation
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import NEW_VERSION, Versioned
from hedwig.security.acl import AclSet
from tests.waiting import until


def entry(*names: str) -> AclEntry:
    rules = tuple(AclRule("alice", frozenset({Operation.PUBLISH}), name=n) for n in names)
    return AclEntry(rules, source="test")


async def test_a_change_during_a_read_leaves_the_rules_watched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The watch a read sets can fire before its answer is handled. The watcher used to mark
    itself armed after the answer, so the read that followed set no watch: every later
    change waited for the poll (here: never)."""
    backend = MemoryBackend()
    store = MemoryMetadataStore(backend, "r")
    await store.start()
    admin = MemoryMetadataStore(backend, "r")  # another session on the same region
    await admin.start()
    list_acls = store.acls.list_acls
    reading = asyncio.Event()
    answered = asyncio.Event()

    async def slow_answer(
        watch: Callable[[], None] | None = None,
    ) -> dict[str, Versioned[AclEntry]]:
        got = await list_acls(watch=watch)
        if watch is not None and not answered.is_set():
            reading.set()
            await answered.wait()
        return got

    monkeypatch.setattr(store.acls, "list_acls", slow_answer)
    seen: list[AclSet] = []
    watcher = AclWatcher(
        store,
        super_users=frozenset(),
        on_rules=seen.append,
        clock=SystemClock(),
        poll_s=3600.0,
    )
    start = asyncio.get_running_loop().create_task(watcher.start())
    await reading.wait()
    v = await admin.acls.write_acl("ns/alice", entry("a"), NEW_VERSION)  # fires the watch
    answered.set()
    await start
    try:
        await until(lambda: bool(seen) and "ns/alice" in seen[-1].entries)
        await admin.acls.write_acl("ns/alice", entry("a", "b"), v)
        await until(lambda: seen[-1].entries.get("ns/alice") == entry("a", "b"))
    finally:
        watcher.stop()
