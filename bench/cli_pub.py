"""``hedwig pub`` as users run it, beside ``hedwig bench`` on the same hub, in one run.

    .venv/bin/python bench/cli_pub.py [--lines 300000] [--rounds 3]

One embedded hub (ZooKeeper and a hub process on loopback, replication 1/1/1). Each round pipes
a file of ``--lines`` lines of 100 bytes (99 characters and a newline) into ``hedwig pub`` twice,
once quiet (``-q``) and once printing an acknowledgement per line to ``/dev/null``, and runs
``hedwig bench`` for the same number of messages. The ``hedwig pub`` figures are the whole
process: interpreter start, connecting, reading stdin, every acknowledgement, exit. Prints one
JSON object with every round and the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hedwig.devcluster.cluster import DevCluster


def timed_pub(hub: str, topic: str, source: Path, quiet: bool) -> float:
    argv = [sys.executable, "-m", "hedwig", "pub", topic, "--hub", hub]
    if quiet:
        argv.append("-q")
    with open(source, "rb") as stdin:
        start = time.perf_counter()
        subprocess.run(argv, stdin=stdin, stdout=subprocess.DEVNULL, check=True)
        return time.perf_counter() - start


def library(hub: str, lines: int) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "hedwig", "bench", "--hub", hub, "--messages", str(lines)],
        capture_output=True,
        text=True,
        check=True,
    )
    rate: float = json.loads(out.stdout)["publish"]["msgs_per_s"]
    return rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    source = Path(tempfile.mkdtemp(prefix="hedwig-pub-")) / "lines"
    source.write_bytes(b"".join(b"%099d\n" % i for i in range(args.lines)))
    rounds: list[dict[str, float]] = []
    with DevCluster(hubs=1, region="bench-cli").start() as cluster:
        hub = cluster.addresses[0]
        for r in range(args.rounds):
            quiet = timed_pub(hub, f"cli-quiet-{r}", source, quiet=True)
            acks = timed_pub(hub, f"cli-acks-{r}", source, quiet=False)
            rounds.append(
                {
                    "pub_quiet_lines_per_s": round(args.lines / quiet),
                    "pub_quiet_seconds": round(quiet, 2),
                    "pub_acks_lines_per_s": round(args.lines / acks),
                    "bench_msgs_per_s": library(hub, args.lines),
                }
            )
            print(json.dumps(rounds[-1]), file=sys.stderr, flush=True)
    source.unlink()
    medians = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    print(json.dumps({"lines": args.lines, "size": 100, "rounds": rounds, "median": medians}))


if __name__ == "__main__":
    main()
