"""Operator-wide settings, from ``HEDWIG_OPERATOR_*`` environment variables.

Per-pool behaviour (rebalancing interval, thresholds) lives in each HubPool's spec; what is
here is how the operator itself paces its work. Each field says its unit and why its default.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    # How often each pool's status and its Topics' status are refreshed from ZooKeeper and the
    # StatefulSet. Also how soon a Topic whose pool appeared late gets reconciled, and how
    # soon a topic whose owner died is given a new one. 15 s keeps ZooKeeper reads per pool
    # to a handful a minute.
    status_interval_s: float = 15.0
    # How long to wait for a hub to take an unowned topic (one TopicStats request, which makes
    # a hub claim it). A claim recovers the previous ledger, which can take seconds.
    activate_timeout_s: float = 10.0
    # How long the owner gets to hand a topic over gracefully before its owner znode is deleted.
    graceful_move_timeout_s: float = 15.0
    # Connecting to a pool's ZooKeeper; failures are retried at the next refresh.
    zk_connect_timeout_s: float = 10.0
    # Operator's own ZooKeeper session timeout. It holds no ephemeral nodes, so only
    # reconnection speed matters.
    zk_session_timeout_s: float = 10.0
    # How many Topics a pool's worker refreshes per second, at most, on average over a status
    # interval (each refresh is about six metadata reads and maybe a status patch). A pool of
    # up to this many times ``status_interval_s`` Topics (750) has every Topic refreshed every
    # interval; a larger one refreshes the Topics that need it first (not Ready, owner gone,
    # spec changed, hot), then the longest unrefreshed, so its cost per second stays bounded
    # whatever the number of Topics and a quiet Topic's status is refreshed less often.
    topic_refreshes_per_s: float = 50.0
    # Back-off for a failed Topic reconciliation (ZooKeeper unreachable).
    retry_delay_s: float = 10.0
    # Whether rebalancing may run at all (a kill switch for the whole operator).
    rebalancing_enabled: bool = True

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(f"HEDWIG_OPERATOR_{f.name.upper()}")
            if raw is None:
                continue
            if f.type in ("bool", bool):
                values[f.name] = raw.strip().lower() in ("1", "true", "yes", "on")
            else:
                values[f.name] = float(raw)
        return cls(**values)  # type: ignore[arg-type]
