"""``hedwig subscription create``'s type and delivery policy options: ``--type
shared|key-shared|failover|exclusive``, ``--ack-timeout 30s``, ``--max-deliveries 5``,
``--backoff 1s,10s,60s``, ``--dead-letter TOPIC``, ``--delay 5m``. An exclusive subscription
with none of them is made as before (SUBSCRIBE); any other goes through CREATE_SUBSCRIPTION,
and the hub checks the policy."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.metadata.records.queueing import parse_duration_ms
from hedwig.protocol import SubscriptionType


@dataclass(frozen=True, slots=True)
class Policy:
    type: SubscriptionType
    ack_timeout_s: float = 30.0
    max_deliveries: int = 0
    backoff_s: tuple[float, ...] = ()
    dead_letter: str | None = None
    delay_s: float = 0.0


def add_policy_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--type",
        default="exclusive",
        metavar="TYPE",
        help="exclusive (one consumer, cumulative), failover, shared or key-shared",
    )
    p.add_argument(
        "--ack-timeout",
        metavar="DURATION",
        help="a message unacknowledged this long after delivery comes again (default 30s)",
    )
    p.add_argument(
        "--max-deliveries",
        type=int,
        metavar="N",
        help="past N deliveries a message is dead-lettered, or dropped and counted "
        "(default: no limit)",
    )
    p.add_argument(
        "--backoff",
        metavar="D1,D2,...",
        help="waits before delivery 2, 3, ... of a nacked or timed-out message (e.g. 1s,10s,60s)",
    )
    p.add_argument(
        "--dead-letter",
        metavar="TOPIC",
        help="a message past --max-deliveries is published to TOPIC (which must exist), then "
        "acknowledged",
    )
    p.add_argument(
        "--delay",
        metavar="DURATION",
        help="every message is delivered this long after its publish time (a retry "
        "subscription; at most a week)",
    )


def policy_from(args: argparse.Namespace) -> Policy | None:
    """The policy the options ask for; ``None`` for a plain exclusive subscription."""
    kind = SubscriptionType.parse(args.type)
    asked = (
        args.ack_timeout is not None
        or args.max_deliveries is not None
        or args.backoff
        or args.dead_letter
        or args.delay
    )
    if not kind.many:
        if asked:
            raise UsageError(
                "an exclusive subscription consumes cumulatively: --ack-timeout, "
                "--max-deliveries, --backoff, --dead-letter and --delay need --type failover, "
                "shared or key-shared"
            )
        return None
    timeout = parse_duration_ms(args.ack_timeout) if args.ack_timeout is not None else 30_000
    steps = (
        tuple(parse_duration_ms(t) / 1000 for t in args.backoff.split(",")) if args.backoff else ()
    )
    delay = parse_duration_ms(args.delay) / 1000 if args.delay else 0.0
    return Policy(kind, timeout / 1000, args.max_deliveries or 0, steps, args.dead_letter, delay)
