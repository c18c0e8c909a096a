"""A publisher's ``deliver_after`` / ``deliver_at``, turned into the ``hedwig-deliver-at``
header (``hedwig.protocol.messages.delivery_time``) the owner of a failover, shared or
key-shared subscription holds the message back by.

``deliver_after`` is seconds from now on the client's clock; ``deliver_at`` an epoch time in
seconds or a timezone-aware ``datetime`` (a naive one is refused: whose midnight it means
would depend on the machine). One of the two at most; a negative delay, a time that is not a
finite number, or a bool is refused here, at once, as ``UsageError``. How far ahead a message
may ask is the hub's setting (``QueueSettings.max_deliver_delay_s``): the hub refuses beyond
it, not retried.
"""

from __future__ import annotations

import math
from datetime import datetime

from hedwig.errors import UsageError
from hedwig.protocol.messages import deliver_at_header


def delivery_header(
    *, deliver_after: float | None, deliver_at: float | datetime | None, now_ms: int
) -> tuple[str, bytes]:
    """The header for the delay asked for (one of the two must be given)."""
    if deliver_after is not None and deliver_at is not None:
        raise UsageError("give deliver_after or deliver_at, not both")
    if deliver_after is not None:
        after = _seconds(deliver_after, "deliver_after")
        if after < 0:
            raise UsageError(f"deliver_after is seconds from now, 0 or more, not {after}")
        return deliver_at_header(now_ms + round(after * 1000))
    if isinstance(deliver_at, datetime):
        if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
            raise UsageError(
                "deliver_at must be a timezone-aware datetime (e.g. with tzinfo=timezone.utc)"
            )
        at = deliver_at.timestamp()
    else:
        at = _seconds(deliver_at, "deliver_at")
    if at < 0:
        raise UsageError(f"deliver_at is an epoch time in seconds, 0 or more, not {at}")
    return deliver_at_header(round(at * 1000))


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{what} is a finite number of seconds, not {value!r}")
    return float(value)
