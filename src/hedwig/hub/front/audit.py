"""The audit log (the ``hedwig.audit`` logger): one JSON line per refusal, bounded whatever a
peer sends.

A refusal is written as one JSON object a line (``docs/security.md`` shows one). What a peer
chooses is cut to ``FIELD_CHARS`` characters with a marker saying how much was left out: the
topic, the principal (a token's ``sub`` is its issuer's to choose, and an unknown issuer's
name is the token's), and the message, which quotes them. Lines keep non-ASCII text as it is
(``ensure_ascii=False``): escaped, each character of a name made of control or non-Latin
characters became six or more, and refused anonymous requests were logged at up to 26 times
their size.

Each connection may write ``BURST`` lines at once, then one per ``REFILL_S`` (a token
bucket, ``AuditBudget``); the lines it may not write are counted, and the next line it writes,
or the line written when it closes, says how many were suppressed (``"suppressed": N``), so a
client that sends refused requests as fast as it can costs the log a line a second.
"""

from __future__ import annotations

import json
import logging
from typing import Protocol

from hedwig.clock import Clock

audit = logging.getLogger("hedwig.audit")

# Characters kept of a field a peer chooses (a topic name, a principal, a message).
FIELD_CHARS = 256
MESSAGE_CHARS = 2 * FIELD_CHARS
# A connection's lines: this many at once, then one per REFILL_S.
BURST = 10
REFILL_S = 1.0


def cut(text: str, limit: int = FIELD_CHARS) -> str:
    """``text``, or its first ``limit`` characters and a marker of how many more it had."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}...[{len(text) - limit} more characters]"


class AuditBudget:
    """One connection's lines: a token bucket, and the lines it could not write since the
    last one it did."""

    __slots__ = ("_at", "_clock", "_tokens", "suppressed")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._tokens = float(BURST)
        self._at = clock.monotonic()
        self.suppressed = 0

    def take(self) -> bool:
        now = self._clock.monotonic()
        self._tokens = min(float(BURST), self._tokens + (now - self._at) / REFILL_S)
        self._at = now
        if self._tokens >= 1:
            self._tokens -= 1
            return True
        self.suppressed += 1
        return False


class Audited(Protocol):
    """What the audit log reads of a connection (``hedwig.hub.front.access.Caller``)."""

    name: str
    audit: AuditBudget


def write(conn: Audited, level: int, line: dict[str, object]) -> None:
    """Write ``line`` for ``conn`` if its budget allows (with the count of lines it did not)."""
    if not audit.isEnabledFor(level):
        return
    budget = conn.audit
    if not budget.take():
        return
    if budget.suppressed:
        line["suppressed"] = budget.suppressed
        budget.suppressed = 0
    audit.log(level, json.dumps(line, sort_keys=True, ensure_ascii=False))


def closed(conn: Audited, principal: str) -> None:
    """``conn`` is gone: say how many of its lines were not written, if any were not."""
    budget = conn.audit
    if budget.suppressed:
        audit.warning(
            json.dumps(
                {
                    "event": "suppressed",
                    "peer": conn.name,
                    "principal": cut(principal),
                    "suppressed": budget.suppressed,
                },
                sort_keys=True,
                ensure_ascii=False,
            )
        )
        budget.suppressed = 0
