"""``hedwig sim``: the rebalancing policy against synthetic workloads (no cluster needed)."""

from __future__ import annotations

import argparse
import json

from hedwig.placement.pool_simulator import AUTOSCALERS, POOL_SCENARIOS, Workload, simulate_pool
from hedwig.placement.rebalance import RebalanceConfig
from hedwig.placement.simulator import SCENARIOS, simulate


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sim",
        help="simulate the rebalancing policy on synthetic workloads",
        description="Run the rebalancing policy the hubs and the operator share "
        "(hedwig.placement.rebalance) on synthetic load, cycle by cycle, with no cluster; print "
        "each scenario's moves and final balance as a JSON line.",
    )
    p.add_argument(
        "--scenario",
        choices=[*SCENARIOS, *POOL_SCENARIOS, "all"],
        default="all",
        help="the workload, or hour and step for the hub pool's autoscaling (default: all)",
    )
    p.add_argument("--hubs", type=int, default=3, help="hubs simulated (default 3)")
    p.add_argument("--topics", type=int, default=60, help="topics simulated (default 60)")
    p.add_argument("--cycles", type=int, default=15, help="balancing cycles run (default 15)")
    p.add_argument(
        "--confirmations",
        type=int,
        default=2,
        help="cycles a hub must stay overloaded before it sheds load (default 2)",
    )
    p.add_argument(
        "--max-moves", type=int, default=10, help="topics moved per cycle at most (default 10)"
    )
    p.add_argument(
        "--margin", type=float, default=0.2, help="overload margin over the mean (default 0.2)"
    )
    p.add_argument("--seed", type=int, default=1, help="of the synthetic load (default 1)")
    pool = p.add_argument_group("hub pool autoscaling (--scenario hour or step)")
    pool.add_argument(
        "--autoscaler",
        choices=[*AUTOSCALERS, "both"],
        default="both",
        help="the pool's own policy, a model of the CPU-based HPA, or both side by side (default)",
    )
    pool.add_argument("--minutes", type=float, default=60.0, help="length of the run (default 60)")
    pool.add_argument(
        "--drain-any", action="store_true", help="drain the cheapest hub, not the last ordinal"
    )
    p.set_defaults(func=run_sim)


def run_sim(args: argparse.Namespace) -> int:
    config = RebalanceConfig(
        overload_margin=args.margin,
        confirmations=args.confirmations,
        max_moves_per_cycle=args.max_moves,
        cooldown_s=300,
    )
    if args.scenario in POOL_SCENARIOS:
        workload = Workload(
            topics=args.topics,
            start_hubs=args.hubs,
            duration_s=args.minutes * 60,
            drain_any=args.drain_any,
        )
        scalers = AUTOSCALERS if args.autoscaler == "both" else (args.autoscaler,)
        for scaler in scalers:
            result = simulate_pool(
                args.scenario, scaler, workload=workload, rebalance=config, seed=args.seed
            )
            print(json.dumps(result))
        return 0
    names = SCENARIOS if args.scenario == "all" else (args.scenario,)
    for name in names:
        result = simulate(
            name,
            hubs=args.hubs,
            topics=args.topics,
            cycles=args.cycles,
            config=config,
            seed=args.seed,
        )
        print(json.dumps(result))
    return 0
