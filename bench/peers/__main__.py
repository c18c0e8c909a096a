"""``python -m bench.peers``: Hedwig and Kafka side by side (``make bench-peers``).

    python -m bench.peers                       # fetch, 3 rounds, every workload, write the docs
    python -m bench.peers --previous            # the same with Kafka 4.1.1's durable line too
    python -m bench.peers --previous 1 7b       # ... that line on workloads 1 and 7b only
    python -m bench.peers --rounds 5 --workloads 1 2a --systems hedwig kafka-durable
    python -m bench.peers --table A.jsonl B.jsonl   # only render results files into the docs

Results go to one JSON line per run under ``~/.cache/hedwig/peers/results/`` (``--out``); the
table of medians and spread replaces the peer section of ``docs/benchmarks.md`` unless
``--no-docs``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from bench.peers import fetch
from bench.peers.rounds import ROOT, Harness
from bench.peers.systems import DEFAULT_LINES, PREVIOUS_LINE, lines_by_key
from bench.peers.table import render, write_docs
from bench.peers.workloads import by_key


def _exit(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--workloads", nargs="*", help="keys (default: all): 1 2a 2b 3 7a 7b 7c 6 5 4 8a 8b"
    )
    p.add_argument(
        "--systems",
        nargs="*",
        help=f"of {' '.join([*DEFAULT_LINES, PREVIOUS_LINE])} (default: {' '.join(DEFAULT_LINES)})",
    )
    p.add_argument(
        "--previous",
        nargs="*",
        metavar="WORKLOAD",
        help=f"add the line {PREVIOUS_LINE} (the peer before, to show the change of peer), "
        "on these workloads only if any are named",
    )
    p.add_argument("--scale", type=float, default=1.0, help="shrink counts and durations")
    p.add_argument("--out", type=Path, help="results file (JSON lines)")
    p.add_argument("--no-docs", action="store_true", help="do not write docs/benchmarks.md")
    p.add_argument("--note", default="", help="conditions to print under the table")
    p.add_argument("--table", type=Path, nargs="+", help="render these results files and stop")
    args = p.parse_args()
    # Started in the background, the harness may inherit an ignored SIGINT: make SIGTERM and
    # SIGINT unwind it, so every system it started is stopped on the way out.
    signal.signal(signal.SIGTERM, _exit)
    signal.signal(signal.SIGINT, _exit)
    docs = ROOT / "docs" / "benchmarks.md"
    if args.table:
        text = render(args.table, note=args.note)
        print(text)
        if not args.no_docs:
            write_docs(docs, text)
        return
    keys = list(args.systems or DEFAULT_LINES)
    if args.previous is not None and PREVIOUS_LINE not in keys:
        keys.append(PREVIOUS_LINE)
    only = {PREVIOUS_LINE: set(args.previous)} if args.previous else {}
    lines = lines_by_key(keys)
    workloads = [w.scaled(args.scale) for w in by_key(args.workloads)]
    versions = tuple(sorted({line.version for line in lines if line.system == "kafka"}))
    tools = fetch.fetch(versions) if versions else None
    out = args.out or fetch.cache_root() / "results" / f"run-{time.strftime('%Y%m%d-%H%M%S')}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    print(f"results: {out}", file=sys.stderr)
    Harness(
        lines=lines,
        workloads=workloads,
        rounds=args.rounds,
        out=out,
        classpath=tools.classpath if tools else None,
        kafka_python_path=str(tools.python_path) if tools else None,
        log=sys.stderr,
        classpaths=tools.classpaths if tools else {},
        only=only,
    ).run()
    text = render([out], note=args.note)
    print(text)
    if not args.no_docs:
        write_docs(docs, text)


if __name__ == "__main__":
    main()
