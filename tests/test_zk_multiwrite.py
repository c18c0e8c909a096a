"""Which transactions share a ZooKeeper request (``hedwig.metadata.zookeeper.multiwrite``)."""

from __future__ import annotations

import asyncio

from kazoo.exceptions import NodeExistsError, RolledBackError, RuntimeInconsistency
from kazoo.protocol.serialization import Create, Delete, SetData

from hedwig.metadata.zookeeper.multiwrite import (
    MAX_BYTES,
    MAX_OPS,
    PendingWrite,
    settle,
    together,
)


def _write(loop: asyncio.AbstractEventLoop, *requests: object, size: int = 100) -> PendingWrite:
    return PendingWrite(list(requests), size, "/x", loop.create_future())


def _groups(writes: list[PendingWrite]) -> list[list[int]]:
    return [[writes.index(w) for w in group] for group in together(writes)]


async def test_transactions_on_one_znode_or_a_znode_and_its_parent_go_apart() -> None:
    loop = asyncio.get_running_loop()
    writes = [
        _write(loop, Create("/t/a", b"", [], 0)),
        _write(loop, Create("/t/b", b"", [], 0)),  # a sibling: together
        _write(loop, SetData("/t/a", b"", 1)),  # the same znode: a new request
        _write(loop, Create("/t/a/child", b"", [], 0)),  # its child: a new request
        _write(loop, Create("/u/c", b"", [], 0)),
        _write(loop, Delete("/u", -1)),  # the parent of one in the request: a new one
    ]
    assert _groups(writes) == [[0, 1], [2], [3, 4], [5]]


async def test_requests_stay_within_their_bounds_and_skip_callers_gone() -> None:
    loop = asyncio.get_running_loop()
    writes = [
        _write(loop, *(Create(f"/n/{i}-{j}", b"", [], 0) for j in range(5))) for i in range(60)
    ]
    groups = _groups(writes)
    assert [len(g) for g in groups] == [MAX_OPS // 5] * (60 // (MAX_OPS // 5)) + [
        60 % (MAX_OPS // 5)
    ]
    big = [_write(loop, Create(f"/b/{i}", b"", [], 0), size=MAX_BYTES // 2 + 1) for i in range(3)]
    assert _groups(big) == [[0], [1], [2]]
    big[1].fut.cancel()
    assert _groups(big) == [[0], [2]]


async def test_the_failed_transaction_settles_and_the_others_go_again() -> None:
    loop = asyncio.get_running_loop()
    a = _write(loop, Create("/a", b"", [], 0), Create("/a2", b"", [], 0))
    b = _write(loop, Create("/b", b"", [], 0))
    c = _write(loop, Create("/c", b"", [], 0))
    answer = [RolledBackError(), RolledBackError(), NodeExistsError(), RuntimeInconsistency()]
    again = settle([a, b, c], answer)
    assert again == [a, c]
    assert not a.fut.done() and not c.fut.done()
    assert b.fut.result() == [answer[2]]
    settle([a, c], ["/a", "/a2", "/c"])
    assert a.fut.result() == ["/a", "/a2"] and c.fut.result() == ["/c"]


async def test_an_answer_of_only_rolled_back_operations_settles_every_transaction() -> None:
    """A ZooKeeper that broke its own rules (a failed ``multi`` naming no failure) must not
    make the transactions go round for ever."""
    loop = asyncio.get_running_loop()
    a = _write(loop, Create("/a", b"", [], 0))
    b = _write(loop, Create("/b", b"", [], 0))
    assert settle([a, b], [RolledBackError(), RolledBackError()]) == []
    assert a.fut.done() and b.fut.done()
