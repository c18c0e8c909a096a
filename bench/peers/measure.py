"""What both drivers measure with, so the two systems are measured the same way.

- Every message carries a stamp in its first 9 bytes: the time it was due (fixed-rate runs) or
  sent (as-fast-as-possible runs) as ``CLOCK_MONOTONIC`` nanoseconds, which is one clock for
  every process on the machine, and a flag saying whether it belongs to the measured part of
  the run (warm-up messages are delivered and counted but not timed). The rest is padding.
- Publish latency runs from the due time to the acknowledgement callback, and
  publish-to-delivery latency from the due time to the consumer's handling of the message: a
  driver that falls behind its schedule cannot hide it (coordinated omission is counted).
- A process's percentiles are taken from every sample. Several producers or consumers of one
  run each send their samples as a histogram of buckets 0.1 % wide (``histogram``), which the
  harness adds up (``merged_percentiles``): a merged percentile is within 0.1 % of the exact
  one, below the table's three digits, and a run of 16 subscribers need not ship 1.6 million
  floats through a pipe.
- A message's outcome (its future, its delivery callback) counts only once the driver has
  read it: ``outcomes`` in a result is how many it read, and the harness marks a run whose
  producers read fewer than they published (``bench.peers.merge.problem``).
"""

from __future__ import annotations

import math
import os
import struct
import time
from collections import Counter
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


# Bucket ``i`` holds latencies in [e^(i/1000), e^((i+1)/1000)) microseconds: 0.1 % wide.
_BUCKETS_PER_E = 1000


def histogram(samples_s: list[float]) -> dict[str, Any]:
    """Latency samples (seconds) as sparse bucket counts plus the exact maximum, to merge."""
    counts = Counter(int(math.log(max(s * 1e6, 1.0)) * _BUCKETS_PER_E) for s in samples_s)
    return {
        "buckets": {str(k): v for k, v in counts.items()},
        "max_s": max(samples_s, default=0.0),
    }


def merged_percentiles(histograms: list[dict[str, Any]]) -> Percentiles:
    """p50/p99/p99.9/max in milliseconds of the samples behind several histograms
    (``histogram``); a bucket stands for its middle."""
    counts: Counter[int] = Counter()
    for h in histograms:
        for k, v in h["buckets"].items():
            counts[int(k)] += v
    n = sum(counts.values())
    if not n:
        return {"n": 0}
    ordered = sorted(counts.items())

    def at(q: float) -> float:
        rank = min(n - 1, int(q * n))
        seen = 0
        for k, v in ordered:
            seen += v
            if seen > rank:
                return round(math.exp((k + 0.5) / _BUCKETS_PER_E) / 1000, 3)
        raise AssertionError("rank past the samples")

    return {
        "n": n,
        "p50_ms": at(0.50),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": round(max(h["max_s"] for h in histograms) * 1000, 3),
    }


_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name may hold spaces: the fields of interest follow its closing paren.
        fields = f.read().rsplit(")", 1)[1].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / _TICKS


def rss_mb(pid: int) -> float:
    """Resident memory of a process, in MiB (``VmRSS``)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def delivery_report(
    expected: int,
    counts: list[int],
    lat: list[float],
    t0: int,
    first: int,
    last: int,
    cpu_s: float,
) -> dict[str, Any]:
    """A consumer process's raw figures, for ``bench.peers.merge.deliveries``: ``counts`` per
    subscription, each expecting ``expected``; ``t0`` when the consumer started, ``first``
    the earliest stamp it saw (a send or due time), ``last`` its last delivery (all
    ``CLOCK_MONOTONIC`` nanoseconds, one clock for every process); ``cpu_s`` its CPU time."""
    return {
        "received": sum(counts),
        "expected": expected * len(counts),
        "complete": all(c >= expected for c in counts),
        "t0_ns": t0,
        "first_ns": first,
        "last_ns": last,
        "cpu_s": cpu_s,
        "e2e_histogram": histogram(lat),
    }
