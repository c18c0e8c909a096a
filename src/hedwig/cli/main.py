"""``hedwig``: run hubs and a development cluster, publish, subscribe, inspect, benchmark.

The subcommand names and their output formats are a contract scripts rely on
(``docs/operations.md``): ``dev up`` prints ``READY hubs=... zk=...``; ``pub`` and ``sub`` print
``SEQ<TAB>MESSAGE`` lines; every listing takes ``--json``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from hedwig import __version__
from hedwig.cli import (
    acl,
    admin,
    balance,
    bench,
    bundles,
    demo,
    dev,
    ledgers,
    lifecycle,
    links,
    namespaces,
    pub,
    servers,
    sim,
    sub,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hedwig", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"hedwig {__version__}")
    parser.add_argument(
        "--log-level",
        default="WARNING",
        help="logging level for diagnostics on stderr (accepted anywhere on the command line)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    servers.register(commands)
    dev.register(commands)
    pub.register(commands)
    sub.register(commands)
    lifecycle.register(commands)
    admin.register(commands)
    bundles.register(commands)
    bench.register(commands)
    demo.register(commands)
    sim.register(commands)
    balance.register(commands)
    ledgers.register(commands)
    acl.register(commands)
    namespaces.register(commands)
    links.register(commands)
    return parser


def _log_level(argv: list[str]) -> tuple[str, list[str]]:
    """``--log-level X`` wherever it is (before or after the subcommand), and the rest;
    ``HEDWIG_LOG_LEVEL`` when not given (for processes started by others: tests, the lab)."""
    level, rest = os.environ.get("HEDWIG_LOG_LEVEL", "WARNING"), []
    it = iter(argv)
    for arg in it:
        if arg == "--log-level":
            level = next(it, level)
        elif arg.startswith("--log-level="):
            level = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return level, rest


def main(argv: list[str] | None = None) -> int:
    level, rest = _log_level(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(rest)
    numeric = getattr(logging, level.upper(), None)
    if not isinstance(numeric, int):
        print(f"hedwig: --log-level {level!r} is not a logging level", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=numeric,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if numeric > logging.DEBUG:
        # The ZooKeeper client logs every failed connection attempt; the commands say it
        # once, with a hint.
        logging.getLogger("hedwig.metadata.zookeeper.client").setLevel(logging.CRITICAL)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader of stdout or stderr went away (``| head``): stop, quietly, as a failure;
        # what is still buffered goes nowhere instead of into a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.dup2(devnull, sys.stderr.fileno())
        return 1
