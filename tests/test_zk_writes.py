"""Which transactions share a ZooKeeper request, and how the answer to them together is
shared out (``hedwig.metadata.zookeeper.client.writes``)."""

from __future__ import annotations

import asyncio

from hedwig.metadata.zookeeper.client.multi import WriteOp
from hedwig.metadata.zookeeper.client.records import (
    CreateRequest,
    CreateResponse,
    DeleteRequest,
    ErrorResult,
    SetDataRequest,
)
from hedwig.metadata.zookeeper.client.writes import (
    MAX_BYTES,
    MAX_OPS,
    PendingWrite,
    settle,
    together,
)

ROLLED_BACK, NOT_TRIED, NODE_EXISTS = ErrorResult(0), ErrorResult(-2), ErrorResult(-110)


def _write(loop: asyncio.AbstractEventLoop, *requests: WriteOp, size: int = 100) -> PendingWrite:
    return PendingWrite(list(requests), size, "/x", loop.create_future())


def _groups(writes: list[PendingWrite]) -> list[list[int]]:
    return [[writes.index(w) for w in group] for group in together(writes)]


async def test_transactions_on_one_znode_or_a_znode_and_its_parent_go_apart() -> None:
    loop = asyncio.get_running_loop()
    writes = [
        _write(loop, CreateRequest("/t/a", b"", (), 0)),
        _write(loop, CreateRequest("/t/b", b"", (), 0)),  # a sibling: together
        _write(loop, SetDataRequest("/t/a", b"", 1)),  # the same znode: a new request
        _write(loop, CreateRequest("/t/a/child", b"", (), 0)),  # its child: a new request
        _write(loop, CreateRequest("/u/c", b"", (), 0)),
        _write(loop, DeleteRequest("/u", -1)),  # the parent of one in the request: a new one
    ]
    assert _groups(writes) == [[0, 1], [2], [3, 4], [5]]


async def test_requests_stay_within_their_bounds_and_skip_callers_gone() -> None:
    loop = asyncio.get_running_loop()
    writes = [
        _write(loop, *(CreateRequest(f"/n/{i}-{j}", b"", (), 0) for j in range(5)))
        for i in range(60)
    ]
    groups = _groups(writes)
    assert [len(g) for g in groups] == [MAX_OPS // 5] * (60 // (MAX_OPS // 5)) + [
        60 % (MAX_OPS // 5)
    ]
    big = [
        _write(loop, CreateRequest(f"/b/{i}", b"", (), 0), size=MAX_BYTES // 2 + 1)
        for i in range(3)
    ]
    assert _groups(big) == [[0], [1], [2]]
    big[1].fut.cancel()
    assert _groups(big) == [[0], [2]]


async def test_the_failed_transaction_settles_and_the_others_go_again() -> None:
    loop = asyncio.get_running_loop()
    a = _write(loop, CreateRequest("/a", b"", (), 0), CreateRequest("/a2", b"", (), 0))
    b = _write(loop, CreateRequest("/b", b"", (), 0))
    c = _write(loop, CreateRequest("/c", b"", (), 0))
    answer = [ROLLED_BACK, ROLLED_BACK, NODE_EXISTS, NOT_TRIED]
    again = settle([a, b, c], answer)
    assert again == [a, c]
    assert not a.fut.done() and not c.fut.done()
    assert b.fut.result() == [answer[2]]
    made = [CreateResponse("/a"), CreateResponse("/a2"), CreateResponse("/c")]
    settle([a, c], made)
    assert a.fut.result() == made[:2] and c.fut.result() == made[2:]


async def test_an_answer_of_only_rolled_back_operations_settles_every_transaction() -> None:
    """A ZooKeeper that broke its own rules (a failed ``multi`` naming no failure) must not
    make the transactions go round for ever."""
    loop = asyncio.get_running_loop()
    a = _write(loop, CreateRequest("/a", b"", (), 0))
    b = _write(loop, CreateRequest("/b", b"", (), 0))
    assert settle([a, b], [ROLLED_BACK, ROLLED_BACK]) == []
    assert a.fut.done() and b.fut.done()
