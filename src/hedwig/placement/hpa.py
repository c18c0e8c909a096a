"""A model of the Kubernetes HorizontalPodAutoscaler's decision on CPU, the baseline
``hedwig sim`` compares the pool scaling policy (``hedwig.placement.pool_scaling``) with.

It follows the controller's algorithm (kubernetes/kubernetes ``pkg/controller/podautoscaler``:
``replica_calculator.go`` for the count, ``horizontal.go`` for stabilisation and rate limits;
the defaults of ``pkg/apis/autoscaling/v2/defaults.go`` and kube-controller-manager's flags),
run once per sync period:

- The utilisation of each ready pod (CPU used over CPU requested) is averaged over the ready
  pods; the usage ratio is that average over the target. Within ``tolerance`` of 1 the count
  stays; otherwise it becomes ``ceil(ratio x ready pods)``.
- Pods not ready yet (starting) count as using nothing when the ratio says scale up; if the
  ratio recomputed so falls within the tolerance or changes direction, the count stays.
- Stabilisation: the recommendation is kept between the lowest recommendation of the last
  ``scale_up_window_s`` (0 by default: none) and the highest of the last
  ``scale_down_window_s`` (300 s).
- Rate limits: up by at most the larger of ``scale_up_pods`` pods and ``scale_up_percent`` of
  the pods at the start of the period (4 pods, 100 %, per 15 s); down by at most
  ``scale_down_percent`` (100 %) per 15 s; never outside ``min_replicas``..``max_replicas``.

What it leaves out, because a pool of hubs does not exercise it: pods without metrics other
than starting ones, the CPU initialisation period's special cases, and metrics other than one
utilisation. Pure apart from its history, on an injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig.errors import UsageError


@dataclass(frozen=True, slots=True)
class HpaConfig:
    # averageUtilization of the CPU request, as a share.
    target_utilisation: float = 0.6
    # --horizontal-pod-autoscaler-tolerance: a ratio this close to 1 changes nothing.
    tolerance: float = 0.1
    min_replicas: int = 3
    max_replicas: int = 10
    # --horizontal-pod-autoscaler-sync-period (seconds): how often the caller should decide.
    sync_period_s: float = 15.0
    # behavior.scaleUp / scaleDown stabilizationWindowSeconds (defaults 0 and 300).
    scale_up_window_s: float = 0.0
    scale_down_window_s: float = 300.0
    # The default scale-up policies (selectPolicy Max): 4 pods or 100 % per 15 s.
    scale_up_pods: int = 4
    scale_up_percent: float = 100.0
    scale_up_period_s: float = 15.0
    # The default scale-down policy: 100 % per 15 s.
    scale_down_percent: float = 100.0
    scale_down_period_s: float = 15.0

    def __post_init__(self) -> None:
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise UsageError("the HPA needs 1 <= min_replicas <= max_replicas")
        if self.target_utilisation <= 0 or self.tolerance < 0:
            raise UsageError("target_utilisation must be positive and tolerance not negative")
        if min(self.scale_up_window_s, self.scale_down_window_s) < 0:
            raise UsageError("stabilisation windows must not be negative")


@dataclass
class HpaModel:
    config: HpaConfig = field(default_factory=HpaConfig)
    clock: Clock = field(default_factory=SystemClock)
    # (time, recommendation before stabilisation), and (time, replicas added or removed).
    _recommendations: list[tuple[float, int]] = field(default_factory=list)
    _events: list[tuple[float, int]] = field(default_factory=list)

    def decide(self, current: int, ready: Sequence[float], unready: int = 0) -> int:
        """The replicas to set. ``current``: the replicas now; ``ready``: each ready pod's
        utilisation; ``unready``: pods created but not ready yet."""
        now = self.clock.monotonic()
        proposal = self._count(current, ready, unready)
        stabilised = self._stabilise(now, current, proposal)
        desired = self._limit(now, current, stabilised)
        desired = max(self.config.min_replicas, min(self.config.max_replicas, desired))
        if desired != current:
            self._events.append((now, desired - current))
        return desired

    def _count(self, current: int, ready: Sequence[float], unready: int) -> int:
        c = self.config
        if not ready:
            return current  # no metrics: the controller changes nothing
        ratio = sum(ready) / (c.target_utilisation * len(ready))
        if not (unready and ratio > 1):
            if abs(1 - ratio) <= c.tolerance:
                return current
            return math.ceil(ratio * len(ready) - 1e-9)
        pods = len(ready) + unready
        new_ratio = sum(ready) / (c.target_utilisation * pods)
        if abs(1 - new_ratio) <= c.tolerance or new_ratio < 1:
            return current
        replicas = math.ceil(new_ratio * pods - 1e-9)
        return max(replicas, current)

    def _stabilise(self, now: float, current: int, proposal: int) -> int:
        c = self.config
        keep = max(c.scale_up_window_s, c.scale_down_window_s)
        self._recommendations = [(t, r) for t, r in self._recommendations if t > now - keep]
        up = proposal
        down = proposal
        for t, r in self._recommendations:
            if t > now - c.scale_up_window_s:
                up = min(up, r)
            if t > now - c.scale_down_window_s:
                down = max(down, r)
        self._recommendations.append((now, proposal))
        return min(max(current, up), down)

    def _limit(self, now: float, current: int, desired: int) -> int:
        c = self.config
        if desired > current:
            added = sum(n for t, n in self._events if t > now - c.scale_up_period_s)
            start = current - added
            limit = max(start + c.scale_up_pods, math.ceil(start * (1 + c.scale_up_percent / 100)))
            return min(desired, max(limit, current))
        if desired < current:
            removed = -sum(n for t, n in self._events if t > now - c.scale_down_period_s)
            start = current + removed
            limit = math.floor(start * (1 - c.scale_down_percent / 100))
            return max(desired, min(limit, current))
        return desired
