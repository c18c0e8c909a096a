"""Operator-wide settings, from ``HEDWIG_OPERATOR_*`` environment variables.

Per-pool behaviour (rebalancing interval, thresholds) lives in each HubPool's spec; what is
here is how the operator itself paces its work. Each field says its unit and why its default.
They are declared and parsed as the hub's settings are (``hedwig.settings``): each field's
variable, type and default once, a malformed value refused with the variable's name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hedwig.settings import load, setting


@dataclass(frozen=True, slots=True)
class OperatorSettings:
    # How often each pool's status and its Topics' status are refreshed from the metadata
    # store and the StatefulSet. Also how soon a Topic whose pool appeared late gets
    # reconciled, and how soon a topic whose owner died is given a new one. 15 s keeps the
    # store's reads per pool to a handful a minute.
    status_interval_s: float = setting(
        15.0,
        "seconds between refreshes of each pool's and its Topics' status",
        env="HEDWIG_OPERATOR_STATUS_INTERVAL_S",
    )
    # A claim recovers the previous ledger, which can take seconds.
    activate_timeout_s: float = setting(
        10.0,
        "seconds a hub gets to take an unowned topic (one TopicStats request makes it claim)",
        env="HEDWIG_OPERATOR_ACTIVATE_TIMEOUT_S",
    )
    graceful_move_timeout_s: float = setting(
        15.0,
        "seconds the owner gets to hand a topic over gracefully before its owner record goes",
        env="HEDWIG_OPERATOR_GRACEFUL_MOVE_TIMEOUT_S",
    )
    # Failures are retried at the next refresh.
    metadata_connect_timeout_s: float = setting(
        10.0,
        "seconds to connect to a pool's metadata store",
        env="HEDWIG_OPERATOR_METADATA_CONNECT_TIMEOUT_S",
        env_aliases=("HEDWIG_OPERATOR_ZK_CONNECT_TIMEOUT_S",),
    )
    # The operator holds no ephemeral records, so only reconnection speed matters.
    metadata_session_timeout_s: float = setting(
        10.0,
        "seconds; the operator's own session timeout with a pool's metadata store",
        env="HEDWIG_OPERATOR_METADATA_SESSION_TIMEOUT_S",
        env_aliases=("HEDWIG_OPERATOR_ZK_SESSION_TIMEOUT_S",),
    )
    # Each refresh is about six metadata reads and maybe a status patch. A pool of up to
    # this many times ``status_interval_s`` Topics (750) has every Topic refreshed every
    # interval; a larger one refreshes the Topics that need it first (not Ready, owner gone,
    # spec changed, hot), then the longest unrefreshed, so its cost per second stays bounded
    # whatever the number of Topics and a quiet Topic's status is refreshed less often.
    topic_refreshes_per_s: float = setting(
        50.0,
        "Topics a pool's worker refreshes per second at most, on average over a status interval",
        env="HEDWIG_OPERATOR_TOPIC_REFRESHES_PER_S",
    )
    # Long enough not to hammer a store that is down.
    retry_delay_s: float = setting(
        10.0,
        "seconds before a failed Topic reconciliation is tried again",
        env="HEDWIG_OPERATOR_RETRY_DELAY_S",
    )
    rebalancing_enabled: bool = setting(
        True,
        "whether rebalancing may run at all (a kill switch for the whole operator)",
        env="HEDWIG_OPERATOR_REBALANCING_ENABLED",
    )

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> OperatorSettings:
        return load(cls, environ)
