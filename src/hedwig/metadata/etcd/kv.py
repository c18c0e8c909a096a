"""Keys read and written: transactions (through the batcher), single-key reads, paged ranges.

Nearly every operation of the store is one transaction of a few comparisons and operations on
single keys. They are written as bytes by ``wire`` rather than built as the stubs' messages
(three times the CPU, on hubs short of it in a failover) and sent together with the others
under way by ``batches.TxnBatcher``; their answers are the stubs' messages, read field by field
only where a key was read (each field read from protobuf's message makes an object). A range
is read page by page (``PAGE`` keys a request), every page at the revision of the first, so a
listing is one consistent view however long it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.metadata.etcd import wire
from hedwig.metadata.etcd.batches import TxnBatcher
from hedwig.metadata.etcd.connection import Connection
from hedwig.metadata.etcd.wire import Op, get

# Keys per range request when listing (etcd answers in one message: keep it far below 4 MB).
PAGE = 10_000


class Item(NamedTuple):
    """One key as etcd holds it: ``mod`` (its mod revision) is what compare-and-set checks.

    A named tuple rather than a frozen dataclass: made for every key a transaction reads,
    thousands a second in a failover, and a frozen dataclass's construction cost five times
    a tuple's."""

    key: bytes
    value: bytes
    mod: int
    create: int
    lease: int


def _item(kv: Any) -> Item:
    # protobuf's (upb's) fields are ``bytes`` and ``int`` already.
    return Item(kv.key, kv.value, kv.mod_revision, kv.create_revision, kv.lease)


class TxnResult(NamedTuple):
    """A transaction's outcome (a named tuple, as ``Item``)."""

    succeeded: bool
    revision: int
    # The keys read by ``get`` operations of the branch that ran, in order (None: absent).
    reads: tuple[Item | None, ...]


def prefix_end(prefix: bytes) -> bytes:
    """The end of the key range holding every key that starts with ``prefix``."""
    end = bytearray(prefix)
    while end:
        if end[-1] < 0xFF:
            end[-1] += 1
            return bytes(end)
        end.pop()
    return b"\0"


def delete(key: bytes, *, prefix: bool = False) -> Op:
    """A delete of ``key``, or with ``prefix`` of every key that starts with it."""
    return wire.delete(key, prefix_end(key) if prefix else b"")


class KeyValues:
    """Reads and transactions on one connection, transactions through ``batcher``."""

    def __init__(self, connection: Connection, batcher: TxnBatcher) -> None:
        self._connection = connection
        self._batcher = batcher

    async def get(self, key: bytes) -> Item | None:
        return (await self.txn((), (get(key),))).reads[0]

    async def range(self, prefix: bytes, *, keys_only: bool = False) -> tuple[list[Item], int]:
        """Every key under ``prefix``, page by page, and the revision of the first page."""
        end = prefix_end(prefix)
        start = prefix
        out: list[Item] = []
        revision = 0
        while True:
            req = rpc.RangeRequest(
                key=start, range_end=end, limit=PAGE, keys_only=keys_only, revision=revision
            )
            resp = await self._connection.range(req, prefix.decode())
            revision = revision or int(resp.header.revision)
            out.extend(_item(kv) for kv in resp.kvs)
            if not resp.more or not resp.kvs:
                return out, revision
            start = bytes(resp.kvs[-1].key) + b"\0"

    async def txn(
        self, compare: Sequence[bytes], success: Sequence[Op], failure: Sequence[Op] = ()
    ) -> TxnResult:
        """One transaction (its parts from ``wire``): ``compare`` all true runs ``success``,
        else ``failure``; the keys the branch that ran read, in order."""
        resp, revision = await self._batcher.submit(wire.txn(compare, success, failure))
        succeeded = bool(resp.succeeded)
        reads: list[Item | None] = []
        responses = None
        # Only the reads' answers are looked at: the branch that ran says which they are.
        for i, op in enumerate(success if succeeded else failure):
            if op.reads:
                if responses is None:
                    responses = resp.responses
                kvs = responses[i].response_range.kvs
                reads.append(_item(kvs[0]) if kvs else None)
        return TxnResult(succeeded, revision, tuple(reads))
