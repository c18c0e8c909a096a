"""Transactions (``multi``), and those of one turn of the loop sent as one ``multi``.

A claim is one ``multi`` (the topic, its owner record and its first ledger) and a take-over
two (its owner record; the recovered ledger's close, the next ledger and the ledger list),
and a hub claims or takes over hundreds of topics at once. ZooKeeper's cost is per request
far more than per operation: on this project's machine a create alone cost its server about
190 us of CPU, one of 64 in a ``multi`` 9 us (``docs/benchmarks.md``). So the transactions
made in one turn go together (``Writes.transaction``), as the reads of a turn do
(``hedwig.metadata.zookeeper.client.reads``).

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
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from hedwig.errors import MetadataError
from hedwig.metadata.zookeeper.client.channel import Channel
from hedwig.metadata.zookeeper.client.codes import CreateFlag, RolledBack, error_for
from hedwig.metadata.zookeeper.client.multi import MultiRequest, MultiResponse, OpResult, WriteOp
from hedwig.metadata.zookeeper.client.records import (
    Acl,
    CheckVersionRequest,
    CreateRequest,
    DeleteRequest,
    ErrorResult,
    SetDataRequest,
)

# Operations, and bytes of paths and data, sent together at most. ZooKeeper refuses (by
# dropping the connection) a request above ``jute.maxbuffer``, 1 MiB by default; these keep
# a request well under it, and a failure's round of sending again small.
MAX_OPS = 128
MAX_BYTES = 256 << 10
# Bytes a transaction counts for each operation besides its path and data (its header,
# version, flags and ACL).
OP_BYTES = 64
ROLLED_BACK = 0
NOT_TRIED = -2


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a transaction."""

    kind: Literal["check", "create", "delete", "set"]
    path: str
    version: int = -1  # check, delete, set: the znode version required (-1: any)
    value: bytes = b""  # create, set
    ephemeral: bool = False  # create: tied to this session

    def request(self, acl: tuple[Acl, ...]) -> WriteOp:
        if self.kind == "check":
            return CheckVersionRequest(self.path, self.version)
        if self.kind == "create":
            flags = CreateFlag.EPHEMERAL if self.ephemeral else CreateFlag.PERSISTENT
            return CreateRequest(self.path, self.value, acl, int(flags))
        if self.kind == "delete":
            return DeleteRequest(self.path, self.version)
        return SetDataRequest(self.path, self.value, self.version)


class PendingWrite(NamedTuple):
    """A transaction waiting for its turn to end: its operations as requests."""

    requests: Sequence[WriteOp]
    size: int  # bytes it counts toward ``MAX_BYTES``
    path: str  # its first operation's path (errors about the request as a whole name it)
    fut: asyncio.Future[list[OpResult]]


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
    return isinstance(result, ErrorResult) and result.err in (ROLLED_BACK, NOT_TRIED)


def _failed(result: Any) -> bool:
    return isinstance(result, ErrorResult) and not _not_tried(result)


def settle(group: Sequence[PendingWrite], results: Sequence[OpResult]) -> list[PendingWrite]:
    """Gives each transaction of ``group`` its results out of the answer to them together
    (``results``: one for each operation, in order); returns those to send again, rolled
    back only because another failed."""
    again: list[PendingWrite] = []
    # A failure of its own somewhere (not only operations rolled back, which would be a
    # ZooKeeper answering against its own rules: then each takes its answer as it is).
    failed = any(_failed(r) for r in results)
    at = 0
    for write in group:
        mine = list(results[at : at + len(write.requests)])
        at += len(write.requests)
        if failed and len(group) > 1 and all(_not_tried(r) for r in mine):
            again.append(write)  # another's failure: unchanged, so sent again
        elif not write.fut.done():
            write.fut.set_result(mine)
    return again


class Writes:
    """The transactions of one session, gathered per turn of the loop."""

    def __init__(self, channel: Channel, acl: tuple[Acl, ...]) -> None:
        self._channel = channel
        self._acl = acl
        self._writes: list[PendingWrite] = []

    async def transaction(self, ops: Sequence[Op]) -> list[MetadataError | None]:
        """``ops`` all take effect or none does. The outcome of each, in order: ``None`` if
        it took effect, else why not (``NoNode``, ``NodeExists``, ``BadVersionError``...;
        ``RolledBack`` for one undone because another failed). Unavailability raises."""
        requests = [op.request(self._acl) for op in ops]
        size = sum(len(op.path) + len(op.value) + OP_BYTES for op in ops)
        fut: asyncio.Future[list[OpResult]] = asyncio.get_running_loop().create_future()
        self._later(PendingWrite(requests, size, ops[0].path, fut))
        results = await fut
        if not any(type(r) is ErrorResult for r in results):
            return [None] * len(ops)
        return [_outcome(op, r) for op, r in zip(ops, results, strict=True)]

    def _later(self, *writes: PendingWrite) -> None:
        """``writes`` sent once this turn ends, with every other transaction made in it."""
        if not self._writes:
            self._channel.at_turn_end(self._send_writes)
        self._writes.extend(writes)

    def _send_writes(self) -> None:
        writes, self._writes = self._writes, []
        for group in together(writes):
            self._send(group)

    def _send(self, group: list[PendingWrite]) -> None:
        channel = self._channel
        request = MultiRequest(tuple(r for write in group for r in write.requests))

        def answered(err: int, result: Any) -> None:
            channel.slots.give()
            self._answered(group, err, result)

        channel.send_group(
            group[0].path,
            lambda: channel.send(request, answered),
            lambda exc: _fail(group, exc),
        )

    def _answered(self, group: list[PendingWrite], err: int, result: Any) -> None:
        """The answer to transactions sent together, each its own; those only rolled back
        by another's failure go again."""
        ops = sum(len(w.requests) for w in group)
        if err:  # the request as a whole: the connection lost, or refused
            _fail(group, error_for(err, group[0].path))
            return
        if not isinstance(result, MultiResponse) or len(result.results) != ops:
            _fail(group, MetadataError(f"ZooKeeper answered {ops} operations with {result!r}"))
            return
        again = settle(group, result.results)
        if again:
            self._later(*again)


def _outcome(op: Op, result: OpResult) -> MetadataError | None:
    if not isinstance(result, ErrorResult):
        return None
    if result.err in (ROLLED_BACK, NOT_TRIED):
        return RolledBack(
            f"{op.kind} {op.path}: rolled back", code=result.err, name="RolledBack", path=op.path
        )
    return error_for(result.err, op.path, op.version)


def _fail(group: Sequence[PendingWrite], exc: MetadataError) -> None:
    for write in group:
        if not write.fut.done():
            write.fut.set_exception(exc)
