"""Transactions sent together: the concurrent single-key operations of a process, as one etcd
request.

A claim is five or six small etcd operations; claimed a thousand at a time, half of a hub's
time went into gRPC's cost per call (making, sending and finishing each request), and much of
etcd's into its own cost per request. etcd can nest transactions (since 3.3): an outer
transaction with no comparisons runs each nested one with its own comparisons and branches,
in order, in one request, one raft entry and one revision. So the transactions handed to
``submit`` while others are under way wait and go together as one request: one call for up
to a hundred operations under load; a lone transaction is sent as it is at the next turn of
the loop (nothing waits for a timer).

What etcd requires of a request, and this keeps:

- no key written twice (a put or delete of one key in two nested transactions is refused
  as a duplicate): a transaction that writes a key the batch already writes waits for the next
  one; a delete of a range goes alone;
- at most ``--max-txn-ops`` (128 by default) operations per level, and a nested transaction
  gets what its parent leaves: the batch's length plus its largest member's stays within it;
- a request below ``--max-request-bytes`` (1.5 MiB by default): a batch stops at
  ``MAX_BATCH_BYTES``.

Every member of a batch gets the revision of the whole: the revision each key it wrote now
has (a compare-and-set's next version) and, for a write of the ledger-id key, a revision no
other write in the cluster has (one such write per batch, by the first rule). A batch that etcd
refuses as a whole (a limit lower than the defaults) is sent again one member at a time; one
that fails (etcd unreachable) fails each member with that error, as their own calls would.
"""

from __future__ import annotations

import asyncio
import collections
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata.etcd.wire import Txn, nested

log = logging.getLogger(__name__)

# etcd's default --max-txn-ops: operations per level of one transaction.
MAX_TXN_OPS = 128
# Far below etcd's default --max-request-bytes (1.5 MiB).
MAX_BATCH_BYTES = 512 * 1024
# Requests in flight at once (a burst of claims waits on etcd's disk in parallel: 4 at
# a time halved the claims per second); beyond it, transactions wait and go together.
MAX_IN_FLIGHT = 256

# (the transaction's response, the revision of its request)
Answer = tuple[Any, int]


class _Pending:
    """A transaction waiting for its batch, and its caller's future."""

    __slots__ = ("alone", "future", "txn")

    def __init__(self, txn: Txn, future: asyncio.Future[Answer]) -> None:
        self.txn = txn
        self.future = future
        # A range's delete goes alone; so does every member of a batch etcd refused.
        self.alone = txn.writes is None


class TxnBatcher:
    """Sends transactions through ``send`` (one etcd Txn call, given the serialized
    ``TxnRequest``), together when several wait."""

    def __init__(
        self, send: Callable[[bytes], Awaitable[Any]], *, max_in_flight: int = MAX_IN_FLIGHT
    ) -> None:
        self._send = send
        self._max_in_flight = max_in_flight
        self._queue: collections.deque[_Pending] = collections.deque()
        self._in_flight = 0
        self._scheduled = False
        self._tasks: set[asyncio.Task[None]] = set()
        # For the benchmarks and tests: requests sent, transactions they carried, and batches
        # etcd refused as a whole.
        self.requests = 0
        self.transactions = 0
        self.refused = 0

    def submit(self, request: Txn) -> asyncio.Future[Answer]:
        """``request``, sent alone or with others; its response (a ``TxnResponse``) and the
        revision of the request that carried it."""
        loop = asyncio.get_running_loop()
        pending = _Pending(request, loop.create_future())
        self._queue.append(pending)
        if not self._scheduled and self._in_flight < self._max_in_flight:
            self._scheduled = True
            loop.call_soon(self._flush)
        return pending.future

    def _flush(self) -> None:
        self._scheduled = False
        while self._queue and self._in_flight < self._max_in_flight:
            batch = self._take()
            if not batch:
                return  # every waiting one was cancelled
            self._in_flight += 1
            task = asyncio.get_running_loop().create_task(self._run(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _take(self) -> list[_Pending]:
        """The next batch, in order of submission but for those that must wait (a key the
        batch writes already, no room left), which keep their places at the front."""
        batch: list[_Pending] = []
        written: set[bytes] = set()
        waiting: list[_Pending] = []
        size = widest = 0
        queue = self._queue
        while queue:
            p = queue.popleft()
            if p.future.done():
                continue  # its caller gave up before it was sent
            txn = p.txn
            if p.alone:
                if batch:
                    waiting.append(p)
                    continue
                batch.append(p)
                break
            assert txn.writes is not None  # else alone
            fits = (
                len(batch) + 1 + max(widest, txn.width) <= MAX_TXN_OPS
                and size + len(txn.raw) <= MAX_BATCH_BYTES
            )
            if not batch or (fits and written.isdisjoint(txn.writes)):
                batch.append(p)
                written |= txn.writes
                size += len(txn.raw)
                widest = max(widest, txn.width)
            elif not fits:
                waiting.append(p)
                break
            else:
                waiting.append(p)
        queue.extendleft(reversed(waiting))
        return batch

    async def _run(self, batch: list[_Pending]) -> None:
        self.requests += 1
        self.transactions += len(batch)
        try:
            if len(batch) == 1:
                resp = await self._send(batch[0].txn.raw)
                answers = [(resp, int(resp.header.revision))]
            else:
                resp = await self._send(nested([p.txn.raw for p in batch]))
                revision = int(resp.header.revision)
                answers = [(r.response_txn, revision) for r in resp.responses]
        except MetadataUnavailableError as exc:
            self._fail(batch, exc)
        except MetadataError as exc:
            if len(batch) == 1:
                self._fail(batch, exc)
            else:
                # Refused as a whole (a limit of this etcd below its defaults): one by one.
                self.refused += 1
                log.info(
                    "etcd refused %d transactions together (%s): sent one by one", len(batch), exc
                )
                for p in batch:
                    p.alone = True
                self._queue.extendleft(reversed(batch))
        except asyncio.CancelledError:
            for p in batch:
                p.future.cancel()
            raise
        else:
            for p, answer in zip(batch, answers, strict=True):
                if not p.future.done():
                    p.future.set_result(answer)
        finally:
            self._in_flight -= 1
            if self._queue and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)

    @staticmethod
    def _fail(batch: list[_Pending], exc: BaseException) -> None:
        for p in batch:
            if not p.future.done():
                p.future.set_exception(exc)

    async def close(self) -> None:
        """Fail whatever waits, and wait for the requests in flight."""
        while self._queue:
            p = self._queue.popleft()
            if not p.future.done():
                p.future.set_exception(MetadataUnavailableError("etcd client closed"))
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
