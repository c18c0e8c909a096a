"""The operator's own Prometheus metrics: what its pool autoscaler decided, and why it could not.

The hubs' ``/metrics`` say how loaded each hub is; only the operator knows what it made of
that, so it serves these itself (``python -m hedwig_operator --metrics-port``, the chart's
operator PodMonitor). Every series is labelled by the pool's ``namespace`` and ``pool``:

- ``hedwig_pool_autoscaling_replicas{kind}``: ``desired`` (what the policy wants now),
  ``min`` and ``max`` (the spec's bounds) and ``needed`` (hubs the load needs at the target,
  before the bounds: above ``max`` is a pinned pool);
- ``hedwig_pool_autoscaling_utilisation``: the load's share of the serving hubs' capacity;
- ``hedwig_pool_autoscaling_state{state}``: 1 for the policy's current state, 0 for the others;
- ``hedwig_pool_autoscaling_pinned`` and ``..._stalled``: 1 while the pool needs more than its
  maximum, or a change is overdue (the alerts' conditions);
- ``hedwig_pool_autoscaling_decisions_total{action}``: the decisions that did something, by
  the action's Event reason (``ScalingOut``, ``DrainStarted``, ``ScalingIn``, ...).

A pool whose autoscaling is switched off, or that is deleted, has its series removed.
"""

from __future__ import annotations

import contextlib

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server

from hedwig.placement.pool_records import PoolDecision, PoolState, ScaleAction

REGISTRY = CollectorRegistry()
_POOL = ("namespace", "pool")

REPLICAS = Gauge(
    "hedwig_pool_autoscaling_replicas",
    "Hub counts of an autoscaled pool: desired, min, max, and needed by the load",
    [*_POOL, "kind"],
    registry=REGISTRY,
)
UTILISATION = Gauge(
    "hedwig_pool_autoscaling_utilisation",
    "The region's load as a share of the serving hubs' capacity",
    _POOL,
    registry=REGISTRY,
)
STATE = Gauge(
    "hedwig_pool_autoscaling_state",
    "1 for the pool autoscaler's current state",
    [*_POOL, "state"],
    registry=REGISTRY,
)
PINNED = Gauge(
    "hedwig_pool_autoscaling_pinned",
    "1 while the pool is at its maximum and its load needs more hubs",
    _POOL,
    registry=REGISTRY,
)
STALLED = Gauge(
    "hedwig_pool_autoscaling_stalled",
    "1 while a scale change is overdue",
    _POOL,
    registry=REGISTRY,
)
DECISIONS = Counter(
    "hedwig_pool_autoscaling_decisions",
    "Pool autoscaler decisions that did something, by action",
    [*_POOL, "action"],
    registry=REGISTRY,
)
_KINDS = ("desired", "min", "max", "needed")
_ACTING = tuple(a for a in ScaleAction if a not in (ScaleAction.NONE, ScaleAction.HOLD))


def observe(
    namespace: str, pool: str, decision: PoolDecision, *, min_hubs: int, max_hubs: int
) -> None:
    """Record one cycle's decision of a pool."""
    labels = (namespace, pool)
    counts = (decision.replicas, min_hubs, max_hubs, decision.needed)
    for kind, value in zip(_KINDS, counts, strict=True):
        REPLICAS.labels(*labels, kind).set(value)
    UTILISATION.labels(*labels).set(decision.utilisation)
    for state in PoolState:
        STATE.labels(*labels, state.value).set(1 if state is decision.state else 0)
    PINNED.labels(*labels).set(1 if decision.pinned else 0)
    STALLED.labels(*labels).set(1 if decision.stalled else 0)
    if decision.action in _ACTING:
        DECISIONS.labels(*labels, decision.action.value).inc()
    else:
        for action in _ACTING:  # the series exist from the first cycle, at 0
            DECISIONS.labels(*labels, action.value)


def forget(namespace: str, pool: str) -> None:
    """Remove a pool's series (autoscaling off, or the pool deleted)."""
    for kind in _KINDS:
        _remove(REPLICAS, namespace, pool, kind)
    for state in PoolState:
        _remove(STATE, namespace, pool, state.value)
    for action in _ACTING:
        _remove(DECISIONS, namespace, pool, action.value)
    for gauge in (UTILISATION, PINNED, STALLED):
        _remove(gauge, namespace, pool)


def _remove(metric: Gauge | Counter, *labels: str) -> None:
    with contextlib.suppress(KeyError):  # never observed
        metric.remove(*labels)


def serve(port: int, address: str = "0.0.0.0") -> None:
    """Serve ``/metrics`` on ``port`` from a thread of its own."""
    start_http_server(port, addr=address, registry=REGISTRY)
