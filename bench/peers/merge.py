"""One run's result from its driver processes' reports: several producers or consumers as one.

A workload with four producers and four consumers (the OpenMessaging Benchmark's shapes) runs
eight driver processes; each reports what it alone saw. Their figures add up as follows:

- throughput is every producer's messages over the time from the earliest producer's start to
  the latest one's end (the producers start together, after a barrier: ``rounds.py``), and
  delivery every consumer's messages from the consumers' start (or the first message's stamp,
  for live delivery) to the last delivery anywhere;
- latency percentiles come from the sum of the processes' histograms (``measure.py``);
- CPU per message is the processes' CPU time over their messages.

``problem`` says why a run's figures must not count, for the harness to record as its error:
a producer that published with a per-message outcome (``each``) but read fewer outcomes than
it published, or any outcome that was a failure. That is the check that a delivery callback
line really resolves every message, as each of Hedwig's futures is read.
"""

from __future__ import annotations

from typing import Any

from bench.peers.measure import merged_percentiles
from bench.peers.workloads import EACH


def productions(reports: list[dict[str, Any]]) -> dict[str, Any]:
    n = sum(r["messages"] for r in reports)
    seconds = max(
        1e-9, (max(r["end_ns"] for r in reports) - min(r["start_ns"] for r in reports)) / 1e9
    )
    out: dict[str, Any] = {
        "producers": len(reports),
        "kind": reports[0]["kind"],
        "messages": n,
        "seconds": round(seconds, 3),
        "msgs_per_s": round(n / seconds),
        "client_cpu_us_per_msg": round(sum(r["cpu_s"] for r in reports) / max(1, n) * 1e6, 2),
        # Fixed rate: from each message's due time; as fast as acks come: from its send,
        # sampled every 100th message, queueing included.
        "publish": merged_percentiles([r["publish_histogram"] for r in reports]),
        "outcomes": sum(r["outcomes"] for r in reports),
        "failed": sum(r["failed"] for r in reports),
    }
    if any(r.get("fixed_rate") for r in reports):
        out["achieved_rate"] = out.pop("msgs_per_s")
    return out


def deliveries(reports: list[dict[str, Any]]) -> dict[str, Any]:
    received = sum(r["received"] for r in reports)
    last = max(r["last_ns"] for r in reports)
    firsts = [r["first_ns"] for r in reports if r["first_ns"]]
    begin = max(min(r["t0_ns"] for r in reports), min(firsts, default=0))
    seconds = max(1e-9, (last - begin) / 1e9) if last else 0.0
    return {
        "consumers": len(reports),
        "received": received,
        "expected": sum(r["expected"] for r in reports),
        "complete": all(r["complete"] for r in reports),
        "seconds": round(seconds, 3),
        "delivered_per_s": round(received / seconds) if seconds else 0,
        "client_cpu_us_per_msg": (
            round(sum(r["cpu_s"] for r in reports) / received * 1e6, 2) if received else 0.0
        ),
        "e2e": merged_percentiles([r["e2e_histogram"] for r in reports]),
    }


def problem(produced: dict[str, Any]) -> str | None:
    """Why the run's figures must not count, if they must not."""
    if produced["failed"]:
        return f"{produced['failed']} messages failed"
    if produced["kind"] == EACH and produced["outcomes"] != produced["messages"]:
        return (
            f"{produced['outcomes']} outcomes read for {produced['messages']} messages "
            "published each with one"
        )
    return None
