"""What both drivers measure with, so the two systems are measured the same way.

- Every message carries a stamp in its first 9 bytes: the time it was due (fixed-rate runs) or
  sent (as-fast-as-possible runs) as ``CLOCK_MONOTONIC`` nanoseconds, which is one clock for
  every process on the machine, and a flag saying whether it belongs to the measured part of
  the run (warm-up messages are delivered and counted but not timed). The rest is padding.
- Publish latency runs from the due time to the acknowledgement callback, and
  publish-to-delivery latency from the due time to the consumer's handling of the message: a
  driver that falls behind its schedule cannot hide it (coordinated omission is counted).
- Percentiles are taken from every sample (no histogram buckets).
"""

from __future__ import annotations

import os
import struct
import time
from typing import Any, TypedDict

STAMP = struct.Struct(">QB")
MEASURED = 1
WARMUP = 0


def payload(due_ns: int, flag: int, size: int) -> bytes:
    """A message of ``size`` bytes (at least the 9-byte stamp) stamped with ``due_ns``."""
    head = STAMP.pack(due_ns, flag)
    return head + b"x" * (size - len(head)) if size > len(head) else head


def read_stamp(value: bytes) -> tuple[int, int]:
    due_ns, flag = STAMP.unpack_from(value)
    return due_ns, flag


now_ns = time.monotonic_ns


class Percentiles(TypedDict, total=False):
    n: int
    p50_ms: float
    p99_ms: float
    p999_ms: float
    max_ms: float


def percentiles(samples_s: list[float]) -> Percentiles:
    """p50/p99/p99.9/max in milliseconds of latency samples given in seconds."""
    if not samples_s:
        return {"n": 0}
    s = sorted(samples_s)

    def at(q: float) -> float:
        return round(s[min(len(s) - 1, int(q * len(s)))] * 1000, 3)

    return {
        "n": len(s),
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": round(s[-1] * 1000, 3),
    }


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: the fields of interest follow its closing paren.
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS


def delivery_result(
    expected: int,
    counts: list[int],
    lat: list[float],
    t0: int,
    first: int,
    last: int,
    cpu_s: float,
) -> dict[str, Any]:
    """A consumer's figures: ``counts`` per subscription, each expecting ``expected``.

    Delivery throughput runs from the later of the consumer's start ``t0`` (a backlog is read
    from then on) and the first message's stamp ``first`` (its send time, for live fan-out)
    to the last delivery ``last``; ``cpu_s`` is the consumer process's CPU time meanwhile.
    """
    received = sum(counts)
    seconds = max(1e-9, (last - max(t0, first)) / 1e9) if last else 0.0
    return {
        "received": received,
        "expected": expected * len(counts),
        "complete": all(c >= expected for c in counts),
        "seconds": round(seconds, 3),
        "delivered_per_s": round(received / seconds) if seconds else 0,
        "client_cpu_us_per_msg": round(cpu_s / received * 1e6, 2) if received else 0.0,
        "e2e": percentiles(lat),
    }
