"""Hedwig's own figures before and after a change, measured in one run, turn about.

    git worktree add --detach ../before <commit>      # the code to compare against
    .venv/bin/python -m bench.before_after ../before --rounds 5 --workloads 1 3 5 6

Each round runs the same measurements once against each source tree (the order rotating
from round to round), each tree's ``src`` put first on ``PYTHONPATH`` for the driver and the
hubs it starts, while the harness itself (``bench.peers`` and ``hedwig bench`` of this tree)
stays the same: only the code under test changes. The two cores are shared and noisy, so the
table gives the median of the rounds and the lowest and highest value. ``--per-call`` adds
``hedwig bench --embedded --per-call N`` to the trees that have the batch API.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.peers.rounds import ROOT

# (workload, label, path into the result record)
FIGURES: list[tuple[str, str, tuple[str, ...]]] = [
    ("1", "acknowledged msg/s", ("produce", "msgs_per_s")),
    ("1", "producer CPU, µs per message", ("produce", "client_cpu_us_per_msg")),
    ("2a", "publish p99, ms", ("produce", "publish", "p99_ms")),
    ("2a", "publish-to-delivery p99, ms", ("consume", "e2e", "p99_ms")),
    ("2b", "publish p99, ms", ("produce", "publish", "p99_ms")),
    ("2b", "publish-to-delivery p99, ms", ("consume", "e2e", "p99_ms")),
    ("3", "publish p99, ms", ("produce", "publish", "p99_ms")),
    ("3", "hub CPU, % of one core", ("server_cpu_pct",)),
    ("5", "catch-up, delivered msg/s", ("consume", "delivered_per_s")),
    ("5", "consumer CPU, µs per message", ("consume", "client_cpu_us_per_msg")),
    ("6", "delivered msg/s, 16 subscribers", ("consume", "delivered_per_s")),
    ("6", "consumer CPU, µs per delivery", ("consume", "client_cpu_us_per_msg")),
]


def _env(tree: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(tree / "src")
    return env


def _pick(record: dict[str, Any], path: tuple[str, ...]) -> float | None:
    value: Any = record
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return float(value)


def _hedwig_bench(tree: Path, messages: int, per_call: int) -> float:
    cmd = [sys.executable, "-m", "hedwig", "bench", "--embedded", "--messages", str(messages)]
    if per_call > 1:
        cmd += ["--per-call", str(per_call)]
    out = subprocess.run(cmd, env=_env(tree), cwd=ROOT, check=True, capture_output=True)
    return float(json.loads(out.stdout)["publish"]["msgs_per_s"])


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.before_after")
    p.add_argument("before", type=Path, help="a checkout of the code to compare against")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workloads", nargs="*", default=["1", "5", "6"])
    p.add_argument("--scale", type=float, default=0.5)
    p.add_argument("--messages", type=int, default=500_000, help="for hedwig bench")
    p.add_argument("--per-call", type=int, default=1000, help="for hedwig bench (0: skip)")
    p.add_argument("--out", type=Path, default=Path("/tmp/before_after"))
    args = p.parse_args()
    trees = {"before": args.before.resolve(), "after": ROOT}
    args.out.mkdir(parents=True, exist_ok=True)
    bench: dict[str, list[float]] = {}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for name in order:
            tree = trees[name]
            print(f"round {r + 1}: {name}", file=sys.stderr)
            if args.workloads:
                subprocess.run(
                    [
                        *(sys.executable, "-m", "bench.peers", "--systems", "hedwig"),
                        *("--rounds", "1", "--no-docs", "--scale", str(args.scale)),
                        *("--out", str(args.out / f"{name}.jsonl")),
                        *("--workloads", *args.workloads),
                    ],
                    env=_env(tree),
                    cwd=ROOT,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
            bench.setdefault(f"{name}: hedwig bench, one by one", []).append(
                _hedwig_bench(tree, args.messages, 1)
            )
            has_batch_api = b"--per-call" in (tree / "src/hedwig/cli/bench.py").read_bytes()
            if args.per_call > 1 and has_batch_api:
                bench.setdefault(f"{name}: hedwig bench, {args.per_call} per call", []).append(
                    _hedwig_bench(tree, args.messages * 2, args.per_call)
                )
    print("| workload | figure | before | after | after ÷ before |")
    print("|---|---|---|---|---|")
    records = {
        name: [json.loads(line) for line in (args.out / f"{name}.jsonl").read_text().splitlines()]
        if (args.out / f"{name}.jsonl").exists()
        else []
        for name in trees
    }
    for key, label, path in FIGURES:
        if key not in args.workloads:
            continue
        cells = []
        medians = []
        for name in trees:
            values = [
                v for rec in records[name] if rec["workload"] == key and (v := _pick(rec, path))
            ]
            med = statistics.median(values) if values else float("nan")
            medians.append(med)
            cells.append(
                f"{med:,.3g} ({min(values, default=0):,.3g}-{max(values, default=0):,.3g})"
            )
        print(f"| {key} | {label} | {cells[0]} | {cells[1]} | {medians[1] / medians[0]:.2f} |")
    for label, values in sorted(bench.items()):
        print(
            f"| hedwig bench | {label} | {statistics.median(values):,.0f} "
            f"({min(values):,.0f}-{max(values):,.0f}) | | |"
        )


if __name__ == "__main__":
    main()
