"""Frames between hubs for the storage role: ledger replicas for other hubs' topics.

A hub's storage role holds ledger replicas for topics other hubs own. These frames are how a
ledger's writer, a recovering hub or an auditor reaches it (``hedwig.ledger.remote``); a hub's
answers are ``Ok``, ``Entry``, ``Lac`` or an error.
"""

from __future__ import annotations

from typing import Annotated

from hedwig.protocol.fields import (
    I64,
    U64,
    Flag,
    LedgerEnds,
    LedgerIds,
    LedgerLacs,
    RequestId,
    Rest,
    Str,
)
from hedwig.protocol.schema import FrameBase, Sender, frame

# Flag bits, named per frame by the field that holds them.
Recovery = Annotated[bool, Flag(0)]  # a recovery write-back, allowed on a fenced ledger
Fence = Annotated[bool, Flag(0)]  # fence the ledger before answering
Fenced = Annotated[bool, Flag(0)]  # the replica has fenced the ledger (someone recovered it)
Alive = Annotated[bool, Flag(0)]  # the hub asked about is alive in the session named

CLIENT = Sender.CLIENT
HUB = Sender.HUB

# The most ledgers one FENCE_LEDGERS may name (8 bytes each, 24 in the answer).
MAX_FENCED_LEDGERS = 4096


@frame(0x10, CLIENT)
class AddEntry(FrameBase):
    """Store one entry. Answered by ``Ok``, or LEDGER_FENCED unless ``recovery`` is set."""

    request_id: RequestId
    ledger_id: U64
    entry_id: U64
    lac: I64
    payload: Rest
    recovery: Recovery = False


@frame(0x11, CLIENT)
class ReadEntry(FrameBase):
    """Read one stored entry. Answered by ``Entry`` or NO_SUCH_ENTRY."""

    request_id: RequestId
    ledger_id: U64
    entry_id: U64


@frame(0x12, CLIENT)
class ReadLac(FrameBase):
    """The replica's LAC and last stored entry for a ledger; fences it first if asked."""

    request_id: RequestId
    ledger_id: U64
    fence: Fence = False


@frame(0x13, CLIENT)
class DeleteLedger(FrameBase):
    """Delete this replica of a ledger. Answered by ``Ok``."""

    request_id: RequestId
    ledger_id: U64


@frame(0x14, CLIENT)
class StorageHello(FrameBase):
    """Sent first on every storage connection: the replica the sender means to reach (a hub id).
    Answered by ``Ok``, or WRONG_REPLICA by a hub that is not it. A hub that came up where
    another one listened (its address reused, with another data directory) must not be taken for
    it: its empty disk would answer a recovery as a replica holding nothing, and acknowledged
    entries could be judged never written."""

    request_id: RequestId
    replica: Str


@frame(0x15, CLIENT)
class WriteLacs(FrameBase):
    """The last-add-confirmed entry of ledgers whose writer has gone idle (BookKeeper's
    explicit LAC). Every add carries the LAC of the entries before it, so a replica learns a
    ledger's last entry was confirmed only from a later add; a topic that goes idle never
    sends one, and a recovery had to write its last entry back on every replica before it
    could close the ledger on it. Told this, the replica answers a fence with that entry as
    confirmed, and a take-over of an idle topic reads nothing forward. Many ledgers to a
    frame: a hub sends them once a second to each replica, not a request per topic.
    Answered by ``Ok``; ledgers the replica does not hold are ignored."""

    request_id: RequestId
    lacs: LedgerLacs


@frame(0x16, CLIENT)
class FenceLedgers(FrameBase):
    """READ_LAC with fence for many ledgers at once: a take-over fences a ledger per topic, on
    every replica, and after a hub died its survivors took thousands over a second, a request,
    an answer and a task on both sides for each. A recovering hub gathers the fences it has
    for one replica in a turn of its event loop into one of these (at most
    ``MAX_FENCED_LEDGERS``). Answered by ``FencedLedgers`` once every ledger named is fenced
    durably; a ledger the replica could not fence is left out of the answer, and counts as
    that replica not answering for it."""

    request_id: RequestId
    ledger_ids: LedgerIds


@frame(0x17, CLIENT)
class HubAlive(FrameBase):
    """Whether the hub at ``address`` is alive in the session that gave it ``epoch``, as the
    metadata store shows it to the hub asked. A hub cut off from ZooKeeper cannot tell its
    session's end from ZooKeeper's outage, in which it must serve on; past the session
    timeout it asks the other hubs (the storage role's connections, which reach them), and
    one that reads the registry and finds it gone is the word it waits for. Answered by
    ``HubAliveAnswer``, or SERVICE_UNAVAILABLE by a hub that cannot reach the store either."""

    request_id: RequestId
    address: Str
    epoch: U64


@frame(0x8A, HUB)
class HubAliveAnswer(FrameBase):
    """The answer to HUB_ALIVE, from a registry read made for it."""

    request_id: RequestId
    alive: Alive = False


@frame(0x89, HUB)
class FencedLedgers(FrameBase):
    """The answer to FENCE_LEDGERS: for each ledger fenced, its LAC and last stored entry."""

    request_id: RequestId
    ends: LedgerEnds


@frame(0x85, HUB)
class Entry(FrameBase):
    """One stored entry, as it was added."""

    request_id: RequestId
    payload: Rest


@frame(0x86, HUB)
class Lac(FrameBase):
    """A replica's last-add-confirmed and last stored entry of a ledger (-1: none), and whether
    it has fenced the ledger: a writer that cannot reach its metadata store asks this to learn
    that another hub has taken its topic over, without having to write."""

    request_id: RequestId
    lac: I64
    last_entry_id: I64
    fenced: Fenced = False
