"""The cost of the trust boundary: TLS, authentication and ACLs on versus off, in one run.

    .venv/bin/python bench/security.py [ROUNDS]

For one hub (1/1/1) and three hubs (3/3/2), alternates plaintext and secured embedded clusters
round by round (``hedwig bench --embedded [--secure]``: separate hub and client processes,
durable acknowledgements), then measures publish latency at a fixed 10,000 msg/s both ways.
Prints one JSON line per run and a summary with the medians and the secured/plain ratio
(docs/benchmarks.md, "Security").
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from typing import Any

MESSAGES = "300000"


def bench(*args: str) -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "hedwig", "bench", "--embedded", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    summary: dict[str, Any] = {}
    for hubs in ("1", "3"):
        rates: dict[str, list[float]] = {"plain": [], "secure": []}
        for _ in range(rounds):
            for mode in ("plain", "secure"):
                extra = ["--secure"] if mode == "secure" else []
                r = bench("--hubs", hubs, "--messages", MESSAGES, *extra)
                rate = float(r["publish"]["msgs_per_s"])
                rates[mode].append(rate)
                print(json.dumps({"hubs": hubs, "mode": mode, "msgs_per_s": rate}), flush=True)
        plain, secure = statistics.median(rates["plain"]), statistics.median(rates["secure"])
        # On a shared machine the load moves between rounds: each secured run is compared with
        # the plaintext run just before it, and the median of those ratios is reported too.
        paired = [s / p for p, s in zip(rates["plain"], rates["secure"], strict=True)]
        summary[f"{hubs}_hub"] = {
            "plain_median": plain,
            "secure_median": secure,
            "ratio": round(secure / plain, 3),
            "paired_ratio_median": round(statistics.median(paired), 3),
            "plain": rates["plain"],
            "secure": rates["secure"],
        }
    p99: dict[str, list[float]] = {"plain": [], "secure": []}
    for _ in range(rounds):
        for mode in ("plain", "secure"):
            extra = ["--secure"] if mode == "secure" else []
            r = bench("--hubs", "1", "--rate", "10000", "--duration", "10", *extra)
            latency = r["publish"]["latency"]
            p99[mode].append(float(latency["p99_ms"]))
            print(json.dumps({"latency_10k": mode, **latency}), flush=True)
    for mode, values in p99.items():
        summary[f"latency_10k_p99_ms_{mode}"] = {
            "median": statistics.median(values),
            "runs": values,
        }
    print(json.dumps({"summary": summary}), flush=True)


if __name__ == "__main__":
    main()
