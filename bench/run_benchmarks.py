"""Run the benchmarks behind docs/benchmarks.md and print the figures as JSON lines.

    .venv/bin/python bench/run_benchmarks.py            # all of them, several minutes
    .venv/bin/python bench/run_benchmarks.py publish    # one

Each benchmark is a ``hedwig bench`` invocation on an embedded cluster (ZooKeeper and hub
processes on loopback), so the client and the hubs are separate processes as in production.
"""

from __future__ import annotations

import json
import subprocess
import sys

BENCHMARKS: dict[str, list[str]] = {
    # one hub, one topic, 100-byte messages, durable acks, batching client, max rate
    "publish": ["--embedded", "--hubs", "1", "--messages", "500000", "--size", "100"],
    # the same at a fixed 10,000 messages/s: latency of each message from when it was due
    "latency-10k": ["--embedded", "--hubs", "1", "--rate", "10000", "--duration", "20"],
    # publish and deliver to one subscriber
    "pubsub": ["--embedded", "--hubs", "1", "--messages", "300000", "--subscribe"],
}


def run(name: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-m", "hedwig", "bench", *BENCHMARKS[name]],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    result["benchmark"] = name
    return result


def main() -> None:
    names = sys.argv[1:] or list(BENCHMARKS)
    for name in names:
        print(json.dumps(run(name)), flush=True)


if __name__ == "__main__":
    main()
