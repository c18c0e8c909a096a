"""What a replicating owner writes to its local log from a remote region, exactly once.

The owner of a topic in region L holds a hub subscription to the topic in each remote region
R and appends what it is delivered to L's log. A replicated batch is stored with its origin in
the batch itself: its publisher id is ``origin_publisher_id(R, publisher)`` and its publisher
sequence the origin sequence id of its first message in R's log. So the origin travels with
the message wherever the batch goes (every subscriber in L sees it, ``origin_of``), and the log
alone says how far R has been applied.

Rules:

- Nothing loops: of what R delivers, only messages that originated in R (a publisher id
  without an origin) are applied; replicated ones are skipped and acknowledged.
- Exactly once: ``applied`` is the highest origin sequence of R in L's log. A delivered message
  at or below it was applied before (a redelivery after a restart or a take-over) and is
  skipped; the rest are appended in order, a run per publisher.
- The remote subscription is acknowledged up to a message only after its local append is
  durable, so a crash redelivers, never loses; the redelivered part is what ``applied`` skips.
- A new owner learns ``applied`` from the end of the log (``learn_applied``) before it
  subscribes, so a take-over neither skips nor duplicates.
- Lag is R's last sequence id minus the last one delivered and handled: messages behind.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.protocol.messages.delivered import DeliveredMessage
from hedwig.protocol.messages.encoding import Message
from hedwig.protocol.names import ORIGIN_MARK


def origin_publisher_id(region: str, publisher_id: str) -> str:
    """The publisher id a batch replicated from ``region`` is stored under."""
    if not region or "/" in region:
        raise UsageError(f"bad region name {region!r}")
    return f"{ORIGIN_MARK}{region}/{publisher_id}"


def origin_of(publisher_id: str) -> tuple[str, str] | None:
    """``(origin region, origin publisher id)`` of a replicated batch; None for a local one."""
    if not publisher_id.startswith(ORIGIN_MARK):
        return None
    region, sep, publisher = publisher_id[len(ORIGIN_MARK) :].partition("/")
    return (region, publisher) if sep else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """Messages to append as one batch: consecutive, one origin publisher, in origin order."""

    publisher_id: str  # the stored (origin-marked) publisher id
    origin_seq: int  # the origin sequence id of the first message
    messages: tuple[Message, ...]

    @property
    def last_origin_seq(self) -> int:
        return self.origin_seq + len(self.messages) - 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Plan:
    """What to do with one delivery: the runs to append in order, then acknowledge ``ack``."""

    runs: tuple[Run, ...]
    ack: int  # the remote sequence id to consume up to once the runs are durable (0: none)
    skipped: int  # redelivered or not originated in the remote region


@dataclass(slots=True)
class RemoteApplier:
    """The per-(topic, remote region) state: how far the remote region has been applied."""

    remote_region: str
    applied: int = 0  # highest origin sequence of the remote region in the local log
    handled: int = 0  # highest remote sequence delivered and handled (applied or skipped)

    def plan(self, delivered: Sequence[DeliveredMessage]) -> Plan:
        """The runs a delivery (in remote sequence order) adds to the local log."""
        runs: list[Run] = []
        current: list[Message] = []
        run_pid = ""
        run_first = 0
        skipped = 0
        last = 0

        def close() -> None:
            if current:
                runs.append(
                    Run(publisher_id=run_pid, origin_seq=run_first, messages=tuple(current))
                )
                current.clear()

        for m in delivered:
            last = max(last, m.seq)
            if m.seq <= self.applied or origin_of(m.publisher_id) is not None:
                skipped += 1
                close()
                continue
            pid = origin_publisher_id(self.remote_region, m.publisher_id)
            if current and (pid != run_pid or m.seq != run_first + len(current)):
                close()
            if not current:
                run_pid, run_first = pid, m.seq
            current.append(m.message)
        close()
        return Plan(runs=tuple(runs), ack=last, skipped=skipped)

    def applied_run(self, run: Run) -> None:
        """A run is durable in the local log."""
        self.applied = max(self.applied, run.last_origin_seq)

    def done(self, plan: Plan) -> None:
        """Every run of ``plan`` is durable and its acknowledgement sent."""
        self.handled = max(self.handled, plan.ack)

    def lag(self, remote_last_seq: int) -> int:
        """Messages behind: in the remote log and not yet delivered and handled here."""
        return max(0, remote_last_seq - max(self.handled, self.applied))


def learn_applied(remote_region: str, stored: Iterable[tuple[str, int, int]]) -> int:
    """The highest origin sequence of ``remote_region`` among stored batches, each given as
    ``(publisher id, publisher sequence, count)`` (a take-over reads the end of its log)."""
    highest = 0
    for pid, pseq, count in stored:
        origin = origin_of(pid)
        if origin is not None and origin[0] == remote_region and count > 0:
            highest = max(highest, pseq + count - 1)
    return highest
