"""What authenticated connections may hold in frames they have not finished sending.

A frame is buffered until its last byte arrives, and once a connection has authenticated its
frames may be as large as the hub allows (16 MiB, or twice the largest message): twenty
connections of one tenant, each holding all but the last byte of such a frame, took a hub
from 85 to 416 MB, for as long as they stayed. The doorway bounds connections that have not
authenticated (``hedwig.hub.front.doorway``); this bounds the others, by who they are:

- **per principal**: the bytes buffered in the unfinished frames of all of a principal's
  connections, at most ``unfinished_frame_bytes_per_principal`` (128 MiB: eight frames of the
  default limit, far more than a client mid-batch holds: a frame it sends is finished within a
  round trip or two);
- **in all**: at most ``unfinished_frame_bytes`` (512 MiB, half the chart's memory limit for a
  hub) over every principal;
- **time**: a frame begun stays unfinished at most ``unfinished_frame_timeout_s`` (60 s: the
  largest frame at under 300 KB/s), checked by the doorway's sweep.

The connection whose frame takes its principal, or the hub, past a bound is closed then (not
the others: they hold what they held before), its reason counted in
``hedwig_connections_closed_total{reason}``; one past its time is closed at the next sweep.
A connection tells the budget how much it holds after each read (one dictionary update while
it holds any, none while it holds nothing), and whether a frame finished in that read: the
time bound runs from when the frame it holds began, not from when the connection began
holding (a client streaming frames back to back always holds part of one), and the principal
is the one it had then. With authentication off nothing is bounded (every connection is
anonymous: one budget would be shared by all, ``NoDoorway``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from hedwig.clock import Clock
from hedwig.settings import HubConfig

C = TypeVar("C")


@dataclass(frozen=True, slots=True)
class UnfinishedLimits:
    per_principal: int
    in_all: int
    timeout_s: float

    @classmethod
    def of(cls, config: HubConfig) -> UnfinishedLimits:
        s = config.security
        return cls(
            per_principal=s.unfinished_frame_bytes_per_principal,
            in_all=s.unfinished_frame_bytes,
            timeout_s=s.unfinished_frame_timeout_s,
        )


@dataclass(slots=True)
class _Held:
    principal: str
    size: int
    since: float


class UnfinishedFrames(Generic[C]):
    """The bytes each connection holds in its unfinished frame, by principal and in all."""

    def __init__(self, limits: UnfinishedLimits, *, clock: Clock) -> None:
        self.limits = limits
        self._clock = clock
        self._held: dict[C, _Held] = {}
        self._by_principal: dict[str, int] = {}
        self.total = 0

    def of(self, principal: str) -> int:
        """The bytes ``principal``'s connections hold in unfinished frames."""
        return self._by_principal.get(principal, 0)

    def hold(self, conn: C, principal: str, size: int, *, fresh: bool = False) -> str | None:
        """``conn`` now holds ``size`` bytes of an unfinished frame (0: none); ``fresh``: that
        frame began with this read (one finished before it), so it is counted afresh, its
        time and principal its own. Why it must be closed, if its frame has taken its
        principal or the hub past a bound; else None."""
        if fresh and conn in self._held:
            self.release(conn)
        held = self._held.get(conn)
        before = held.size if held is not None else 0
        if size == before:
            return None
        if held is None:
            held = self._held[conn] = _Held(principal, 0, self._clock.monotonic())
        grown = size - before
        owner = held.principal
        total = self._by_principal.get(owner, 0) + grown
        if total:
            self._by_principal[owner] = total
        else:
            self._by_principal.pop(owner, None)
        self.total += grown
        if size:
            held.size = size
        else:
            del self._held[conn]
        if grown <= 0:
            return None
        if total > self.limits.per_principal:
            return (
                f"{owner or 'anonymous'} holds {total} bytes of unfinished frames, over its "
                f"{self.limits.per_principal}"
            )
        if self.total > self.limits.in_all:
            return (
                f"connections hold {self.total} bytes of unfinished frames, over the hub's "
                f"{self.limits.in_all}"
            )
        return None

    def release(self, conn: C) -> None:
        """``conn`` is gone: what it held is free."""
        held = self._held.get(conn)
        if held is not None:
            self.hold(conn, held.principal, 0)

    def overdue(self) -> list[C]:
        """The connections whose frame has stayed unfinished past the time bound."""
        now = self._clock.monotonic()
        limit = self.limits.timeout_s
        return [c for c, h in self._held.items() if now - h.since >= limit]
