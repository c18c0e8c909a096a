"""One consumer of a shared or failover subscription, as its own process, so a test can kill
it with SIGKILL in the middle of a message: ``python -m tests.failure.queue_consumer HUBS TOPIC
SUBSCRIPTION TYPE [WORK_S [POISON]]`` (``WORK_S``: seconds each message takes, default
``WORK_S``; ``POISON``: 1 to nack every message ``poison`` names, each time it comes),
with the client security its environment names (``HEDWIG_TLS_CA``, ``HEDWIG_CERT``,
``HEDWIG_KEY``: a user's certificate on a secured cluster; none on a plain one). It prints one
line per delivery (``D seq count time key value``, the time ``time.monotonic``'s, which every
process on the machine shares) before it works on the message, and one per acknowledgement
sent (``A seq``) or nack (``N seq``), flushed at once: what the process saw survives it. A
message with a delivery time (``hedwig-deliver-at``) gets a line more after its ``D`` line,
``W seq wall_ms deliver_at_ms``: when it arrived by the machine's wall clock, and its time."""

from __future__ import annotations

import asyncio
import sys
import time

from hedwig.client import HedwigClient, RetryPolicy, SubscriptionType
from hedwig.protocol.messages import deliver_at_of
from hedwig.security import ClientSecurity

# What "processing" a message costs: long enough that a kill lands inside one.
WORK_S = 0.002


def poison(value: bytes) -> bool:
    """A message whose processing always fails: a tenth of a publisher's (``pubP:N``, N
    ending in 7), so they are spread over the run."""
    return value.endswith(b"7")


async def main(
    hubs: list[str],
    topic: str,
    name: str,
    kind: SubscriptionType,
    work_s: float,
    nack_poison: bool = False,
) -> None:
    out = sys.stdout
    security = ClientSecurity.from_env()
    retry = RetryPolicy(deadline_s=60)
    async with HedwigClient(hubs, retry=retry, security=security) as client:
        sub = await client.subscribe(topic, name, type=kind, message_window=50)
        out.write("READY\n")
        out.flush()
        async for m in sub:
            key = m.key.decode() if m.key is not None else "-"
            out.write(
                f"D {m.seq} {m.delivery_count} {time.monotonic():.6f} {key} {m.value.decode()}\n"
            )
            at = deliver_at_of(m.headers)
            if at is not None:
                out.write(f"W {m.seq} {time.time() * 1000:.0f} {at}\n")
            out.flush()
            await asyncio.sleep(work_s)
            if nack_poison and poison(m.value):
                sub.nack(m)
                out.write(f"N {m.seq}\n")
            else:
                sub.ack(m)
                out.write(f"A {m.seq}\n")
            out.flush()


if __name__ == "__main__":
    hubs_, topic_, name_, kind_ = sys.argv[1:5]
    work = float(sys.argv[5]) if len(sys.argv) > 5 else WORK_S
    nacks = len(sys.argv) > 6 and sys.argv[6] == "1"
    asyncio.run(main(hubs_.split(","), topic_, name_, SubscriptionType.parse(kind_), work, nacks))
