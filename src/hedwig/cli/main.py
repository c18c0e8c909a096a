"""``hedwig``: run hubs and a development cluster, publish, subscribe, inspect, benchmark.

The subcommand names and their output formats are a contract scripts rely on
(``docs/operations.md``): ``dev up`` prints ``READY hubs=... zk=...``; ``pub`` and ``sub`` print
``SEQ<TAB>MESSAGE`` lines.
"""

from __future__ import annotations

import argparse
import logging
import sys

from hedwig import __version__
from hedwig.cli import acl, admin, balance, bench, demo, dev, ledgers, pubsub, servers, sim


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hedwig", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"hedwig {__version__}")
    parser.add_argument(
        "--log-level", default="WARNING", help="logging level for diagnostics on stderr"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    servers.register(sub)
    dev.register(sub)
    pubsub.register(sub)
    admin.register(sub)
    bench.register(sub)
    demo.register(sub)
    sim.register(sub)
    balance.register(sub)
    ledgers.register(sub)
    acl.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, str(args.log_level).upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
