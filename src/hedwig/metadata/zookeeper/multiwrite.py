"""The transactions of one turn of the loop in one ZooKeeper ``multi``.

A claim is one ``multi`` (the topic, its owner record and its first ledger) and a take-over
two (its owner record; the recovered ledger's close, the next ledger and the ledger list),
and a hub claims or takes over hundreds of topics at once. ZooKeeper's cost is per request
far more than per operation: on this project's machine a create alone cost its server about
190 us of CPU, one of 64 in a ``multi`` 9 us (``docs/benchmarks.md``). So the transactions
made in one turn go together (``ZkBridge.transaction``), as the reads of a turn do
(``hedwig.metadata.zookeeper.multiread``).

A ``multi`` is all or nothing, and these transactions are independent: one failing (a
topic someone else claimed first, a compare-and-set that lost) must not fail the others.
ZooKeeper's answer to a failed ``multi`` says which operation failed (that one has its
error; those before it are rolled back, code 0, and those after it not tried, code -2). The
transaction holding the failed operation gets the answer it would have had alone; the others
changed nothing, and are sent again, together with whatever was made meanwhile. Each round
settles at least the one that failed, so every transaction is answered. Transactions that
touch one znode (or a znode and its parent) never share a request (``together``), so the
failure is always the transaction's own, never one another in the same request caused. Sent
again after another's failure, a transaction is judged on the tree as it is then, as if it
had been made a moment later: no caller is promised an order among transactions it did not
wait for.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

from kazoo.exceptions import RolledBackError, RuntimeInconsistency

# Operations, and bytes of paths and data, sent together at most. ZooKeeper refuses (by
# dropping the connection) a request above ``jute.maxbuffer``, 1 MiB by default; these keep
# a request well under it, and a failure's round of sending again small.
MAX_OPS = 128
MAX_BYTES = 256 << 10
# Bytes a transaction counts for each operation besides its path and data (its header,
# version, flags and ACL).
OP_BYTES = 64


class PendingWrite(NamedTuple):
    """A transaction waiting for its turn to end: kazoo's records of its operations."""

    requests: Sequence[Any]
    size: int  # bytes it counts toward ``MAX_BYTES``
    path: str  # its first operation's path (errors about the request as a whole name it)
    fut: asyncio.Future[list[Any]]


def together(writes: Sequence[PendingWrite]) -> Iterator[list[PendingWrite]]:
    """``writes`` in order, in groups within ``MAX_OPS`` and ``MAX_BYTES`` (a transaction
    larger than that alone). Transactions whose callers stopped waiting are left out.

    No two transactions of a group touch one znode, or one a znode and the other its parent
    (a create needs the parent, a delete a node without children): in a group, what each
    does cannot depend on what another does, so one that fails would have failed alone, and
    the others, sent again, are as they were."""
    group: list[PendingWrite] = []
    ops = size = 0
    paths: set[str] = set()  # the group's znodes
    near: set[str] = set()  # and their parents
    for write in writes:
        if write.fut.done():
            continue
        mine = {r.path for r in write.requests}
        parents = {p.rpartition("/")[0] for p in mine}
        if group and (
            ops + len(write.requests) > MAX_OPS
            or size + write.size > MAX_BYTES
            or not mine.isdisjoint(paths)
            or not mine.isdisjoint(near)
            or not parents.isdisjoint(paths)
        ):
            yield group
            group, ops, size = [], 0, 0
            paths, near = set(), set()
        group.append(write)
        ops += len(write.requests)
        size += write.size
        paths |= mine
        near |= parents
    if group:
        yield group


def _not_tried(result: Any) -> bool:
    """A result of an operation that changed nothing because another failed."""
    return isinstance(result, RolledBackError | RuntimeInconsistency)


def settle(group: Sequence[PendingWrite], results: Sequence[Any]) -> list[PendingWrite]:
    """Gives each transaction of ``group`` its results out of the answer to them together
    (``results``: one for each operation, in order); returns those to send again, rolled
    back only because another failed."""
    again: list[PendingWrite] = []
    # A failure of its own somewhere (not only operations rolled back, which would be a
    # ZooKeeper answering against its own rules: then each takes its answer as it is).
    failed = any(isinstance(r, BaseException) and not _not_tried(r) for r in results)
    at = 0
    for write in group:
        mine = list(results[at : at + len(write.requests)])
        at += len(write.requests)
        if failed and len(group) > 1 and all(_not_tried(r) for r in mine):
            again.append(write)  # another's failure: unchanged, so sent again
        elif not write.fut.done():
            write.fut.set_result(mine)
    return again
