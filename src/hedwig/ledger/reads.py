"""Reading one entry of a ledger from its replicas.

An entry is on the replicas of its write set. They are asked this hub's own disk first and
recently failed ones last (``Replicas.preferred``); a replica that does not answer in
``SPECULATIVE_READ_S`` is not waited for alone: the next is asked too and the first answer
wins (BookKeeper's speculative reads), and the slow one is tried last for a while. A replica
that does not hold the entry (``NoSuchEntryError``) is not suspected; one that fails is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from hedwig.errors import HedwigError, NoSuchEntryError, NotEnoughReplicasError
from hedwig.ledger.handle import write_set
from hedwig.ledger.replicas import Replicas
from hedwig.ledger.storage import LocalStorage
from hedwig.metadata.records import LedgerMetadata

# A replica that has not returned an entry in this long is not waited for alone: the next
# replica of the entry's write set is asked too (see ``read_entry``).
SPECULATIVE_READ_S = 0.25


async def read_entry(
    replicas: Replicas,
    md: LedgerMetadata,
    entry_id: int,
    *,
    among: Collection[str] | None = None,
) -> bytes:
    """Read one entry from the first replica of its write set that has it.

    Replicas are tried local first and recently failed ones last; ``among`` limits the
    replicas asked (recovery asks only those that answered its fence). A replica that has
    not answered within ``SPECULATIVE_READ_S`` is not waited for alone: the next one is asked
    too and the first answer wins (BookKeeper's speculative reads). Without this a read
    waited out a whole storage timeout for a hub that was cut off but not yet known to be,
    e.g. a new owner reading the end of a log back while one replica's hub was partitioned.
    """
    targets = replicas.preferred(
        [a for a in write_set(md, entry_id) if among is None or a in among]
    )
    last: BaseException | None = None
    if targets and isinstance(first := replicas.node(targets[0]), LocalStorage):
        # This hub's own disk (tried first) answers at once, nothing to speculate past: read
        # directly, not through a task and a timed wait. Every take-over reads the last
        # entry of the ledger it recovered, from its own replica; the wait was most of that.
        try:
            return await first.read_entry(md.ledger_id, entry_id)
        except HedwigError as failed:
            if not isinstance(failed, NoSuchEntryError):
                replicas.suspect(targets[0])
            last, targets = failed, targets[1:]
    pending: dict[asyncio.Future[bytes], str] = {}
    untried = iter(targets)

    def ask_next() -> bool:
        address = next(untried, None)
        if address is None:
            return False
        read = replicas.node(address).read_entry(md.ledger_id, entry_id)
        pending[asyncio.ensure_future(read)] = address
        return True

    try:
        ask_next()
        while pending:
            done, _ = await asyncio.wait(
                pending, timeout=SPECULATIVE_READ_S, return_when=asyncio.FIRST_COMPLETED
            )
            if not done:
                ask_next()  # the slow one stays asked
                continue
            for fut in done:
                address = pending.pop(fut)
                exc = fut.exception()
                if exc is None:
                    for slow in pending.values():
                        # Outrun by a replica asked after it: tried last for a while, so the
                        # next reads do not each wait for it first.
                        replicas.suspect(slow)
                    return fut.result()
                if not isinstance(exc, NoSuchEntryError):
                    replicas.suspect(address)
                last = exc
            if not pending:
                ask_next()
    finally:
        for fut in pending:
            fut.cancel()
    if isinstance(last, NoSuchEntryError) or last is None:
        raise last or NoSuchEntryError(f"ledger {md.ledger_id} entry {entry_id}: no replica")
    raise NotEnoughReplicasError(
        f"no replica of ledger {md.ledger_id} returned entry {entry_id}: {last}"
    ) from last
