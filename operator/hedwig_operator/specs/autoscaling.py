"""``HubPool.spec.autoscaling``: the pool sized by Hedwig's own load measure.

Off by default: a pool keeps the ``spec.replicas`` it is given. On, the operator runs the pool
scaling policy (``hedwig.placement.pool_scaling``, whose rules and table of states are in its
docstring) every rebalancing cycle and owns ``spec.replicas`` between ``minReplicas`` and
``maxReplicas``. The load is messages per second in plus out over every hub, against
``spec.rebalancing.hubCapacity`` per hub (one capacity for the rebalancer and the autoscaler:
they must agree on what a full hub is). The defaults are the policy's (``PoolScalingConfig``),
each with its reason there; the CRD repeats them and a unit test keeps the two equal.
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.errors import UsageError
from hedwig.placement.pool_records import PoolScalingConfig
from hedwig_operator.specs.common import Raw, SpecError, bool_or, float_or, int_or, section

_D = PoolScalingConfig()


@dataclass(frozen=True, slots=True)
class AutoscalingSpec:
    enabled: bool = False
    min_replicas: int = _D.min_hubs
    max_replicas: int = _D.max_hubs
    # Share of the pool's capacity aimed at (0-1].
    target_utilisation: float = _D.target_utilisation
    # Scale in only while one hub fewer stays at this share of the target or less.
    scale_in_below: float = _D.scale_in_below
    scale_out_window_s: float = _D.scale_out_window_s
    scale_in_window_s: float = _D.scale_in_window_s
    cooldown_s: float = _D.cooldown_s
    max_scale_out_step: int = _D.max_scale_out_step
    # A hub owning or delivering a topic whose plan changed this recently is never drained.
    reconfiguration_s: float = _D.reconfiguration_s
    stall_after_s: float = _D.stall_after_s

    def to_config(self, *, hub_capacity: float, max_report_age_s: float) -> PoolScalingConfig:
        """The policy's settings, with the rebalancing's capacity and report age."""
        return PoolScalingConfig(
            min_hubs=self.min_replicas,
            max_hubs=self.max_replicas,
            hub_capacity=hub_capacity,
            target_utilisation=self.target_utilisation,
            scale_in_below=self.scale_in_below,
            scale_out_window_s=self.scale_out_window_s,
            scale_in_window_s=self.scale_in_window_s,
            cooldown_s=self.cooldown_s,
            max_scale_out_step=self.max_scale_out_step,
            max_report_age_s=max_report_age_s,
            reconfiguration_s=self.reconfiguration_s,
            stall_after_s=self.stall_after_s,
        )


def parse_autoscaling(spec: Raw, path: str = "spec.autoscaling") -> AutoscalingSpec:
    raw = section(spec, "autoscaling", "spec")
    d = AutoscalingSpec()
    got = AutoscalingSpec(
        enabled=bool_or(raw, "enabled", path, d.enabled),
        min_replicas=int_or(raw, "minReplicas", path, d.min_replicas, minimum=1),
        max_replicas=int_or(raw, "maxReplicas", path, d.max_replicas, minimum=1),
        target_utilisation=float_or(raw, "targetUtilisation", path, d.target_utilisation),
        scale_in_below=float_or(raw, "scaleInBelow", path, d.scale_in_below),
        scale_out_window_s=float_or(raw, "scaleOutWindowSeconds", path, d.scale_out_window_s),
        scale_in_window_s=float_or(raw, "scaleInWindowSeconds", path, d.scale_in_window_s),
        cooldown_s=float_or(raw, "cooldownSeconds", path, d.cooldown_s),
        max_scale_out_step=int_or(raw, "maxScaleOutStep", path, d.max_scale_out_step, minimum=1),
        reconfiguration_s=float_or(raw, "reconfigurationSeconds", path, d.reconfiguration_s),
        stall_after_s=float_or(raw, "stallAfterSeconds", path, d.stall_after_s, minimum=1.0),
    )
    if got.min_replicas > got.max_replicas:
        raise SpecError(f"{path}.minReplicas", "must not be above maxReplicas")
    try:
        got.to_config(hub_capacity=1.0, max_report_age_s=1.0)
    except UsageError as exc:
        raise SpecError(path, str(exc)) from exc
    return got
