"""The gate: when a topic publisher may cut its next batch, and when a cut batch may go out.

The log must hold each publisher's messages in the order they were published, through moves
and failures. A batch is *outstanding* from when it is cut until it is *settled* (acknowledged,
failed for good, or refused by a lane). The gate decides when the next batch may be cut:

    state          entered when                      a new batch               left when
    -------------  --------------------------------  ------------------------  ------------------
    open           none of the below applies         is cut and sent at once   -
    owner unknown  no owner known (first use, moved) waits until none is       an answer names
                                                     outstanding               the owner
    re-sending     a batch failed; it is sent again  waits: the gate is shut   every failed batch
                                                                               has settled
    barrier        TOPIC_MOVED came while batches    waits: the gate is shut   every batch cut
                   were outstanding                                            before the move
                                                                               has settled
    lane switch    a lane refused a batch (USE_LANE) waits: the gate is shut   every batch has
                                                                               settled or been
                                                                               refused

Owner unknown is one batch at a time because pipelined first tries could reach different hubs,
and whichever claimed the topic first would store a later batch ahead of an earlier one.

A batch that is sent again, or that was cut just before the gate closed, first waits until
every batch cut before it has settled (``earlier_settled``): without that, a later batch could
be stored ahead of an earlier one still being retried, and the earlier one would then look
like a duplicate. The publisher checks the gate again just before each attempt goes out, once
its connection is made (a connection to a hub that went away may take a while), so a batch
cut before a failure was noticed waits there for the failed ones.
"""

from __future__ import annotations

from collections.abc import Callable

from hedwig.client.publishing.batch import OutgoingBatch
from hedwig.flag import Flag


class Gate:
    __slots__ = ("_barrier_pseq", "_failed", "_open", "_settled", "_switching", "outstanding")

    def __init__(self) -> None:
        self._open = Flag()
        self._open.set()
        self._settled = Flag()
        # Re-sending: the batches (by publisher sequence) being sent again.
        self._failed: set[int] = set()
        # Barrier: batches below this must settle before the gate reopens (0: none).
        self._barrier_pseq = 0
        # Lane switch: waiting for every batch to settle before switching.
        self._switching = False
        # Every batch cut and not yet settled, by publisher sequence.
        self.outstanding: dict[int, OutgoingBatch] = {}

    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait_to_cut(self, owner_known: Callable[[], bool]) -> None:
        """Until the next batch may be cut: the gate open and, while no owner is known, no
        batch outstanding."""
        await self._open.wait()
        while self.outstanding and not owner_known():
            await self.next_settled()

    def cut(self, batch: OutgoingBatch) -> None:
        self.outstanding[batch.pseq] = batch

    # closing ---------------------------------------------------------------------------------

    def barrier(self, next_pseq: int) -> None:
        """The topic moved: batches cut from ``next_pseq`` on wait for those in flight, so
        none of them can reach the new owner ahead of an earlier one still coming back from
        the old."""
        if self.outstanding:
            self._barrier_pseq = max(self._barrier_pseq, next_pseq)
            self._open.clear()

    def resending(self, pseq: int) -> None:
        """The batch ``pseq`` failed and is about to be sent again."""
        self._failed.add(pseq)
        self._open.clear()

    def switching_lane(self) -> None:
        self._switching = True
        self._open.clear()

    def lane_switched(self) -> None:
        self._switching = False

    # settling --------------------------------------------------------------------------------

    def settle(self, pseq: int) -> None:
        """The batch ``pseq`` settled (``reopen`` next, once the publisher has done with it)."""
        self.outstanding.pop(pseq, None)
        self._failed.discard(pseq)

    def reopen(self) -> None:
        """Open the gate if nothing holds it shut any more, and wake whoever waits for a batch
        to settle."""
        if self._barrier_pseq and (
            not self.outstanding or min(self.outstanding) >= self._barrier_pseq
        ):
            self._barrier_pseq = 0
        if not self._failed and not self._barrier_pseq and not self._switching:
            self._open.set()
        self._settled.set()

    async def next_settled(self) -> None:
        self._settled.clear()
        await self._settled.wait()

    async def earlier_settled(self, pseq: int) -> None:
        """Until every batch cut before ``pseq`` has settled."""
        while self.outstanding and min(self.outstanding) < pseq:
            await self.next_settled()
