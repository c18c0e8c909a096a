"""Rebalancing a pool: read the hubs' load, ask the shared policy for moves, perform them.

The policy is ``hedwig.placement.rebalance.Rebalancer`` (shared with the hubs and the
simulator); the operator adds what only it can: the load source (ZooKeeper reports or
Prometheus), the guards (paused, rolling out), performing each move, and telling users about
it (Events on the Topic and the pool, the Topic's ``status.lastMove``, the pool's
``status.lastRebalance``); and the pool's autoscaler (``spec.autoscaling``), which runs in the
same cycle on the same load and names the hub it drains to the rebalancer.
"""

from hedwig_operator.rebalancing.autoscale import AutoscaleState, autoscale
from hedwig_operator.rebalancing.cycle import RebalanceState, rebalance_cycle
from hedwig_operator.rebalancing.load import (
    PrometheusError,
    fetch_prometheus_load,
    merge_prometheus,
    prometheus_queries,
)
from hedwig_operator.rebalancing.mover import MoveOutcome, perform_move

__all__ = [
    "AutoscaleState",
    "MoveOutcome",
    "PrometheusError",
    "RebalanceState",
    "autoscale",
    "fetch_prometheus_load",
    "merge_prometheus",
    "perform_move",
    "prometheus_queries",
    "rebalance_cycle",
]
