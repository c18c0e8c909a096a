"""The pool's ConfigMap: the hub settings every pod shares, as ``HEDWIG_*`` variables.

The hub reads every setting from the environment (``src/hedwig/hub/config.py``), so the
ConfigMap is mounted with ``envFrom`` and the pod template carries a hash of its data: a
change of settings rolls the pods, as it must, since hubs read them at start only.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hedwig_operator.builders.labels import child_metadata, configmap_name
from hedwig_operator.builders.security import security_environment
from hedwig_operator.resources import DATA_DIR, HUB_PORT, METRICS_PORT
from hedwig_operator.specs import PoolSpec


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def hub_environment(pool: PoolSpec, operator_principal: str = "") -> dict[str, str]:
    """The settings shared by every hub of the pool (the advertised address is per pod);
    with ``spec.security``, TLS, authentication and ACLs with ``operator_principal`` (the
    operator's own) as a super-user."""
    env = {
        "HEDWIG_ZK": pool.zk_connect,
        "HEDWIG_REGION": pool.region,
        "HEDWIG_LISTEN": f"0.0.0.0:{HUB_PORT}",
        "HEDWIG_DATA_DIR": DATA_DIR,
        "HEDWIG_METRICS_PORT": str(METRICS_PORT),
        # Probes come from the kubelet on the pod's IP, not from loopback.
        "HEDWIG_METRICS_HOST": "0.0.0.0",
        "HEDWIG_PLACEMENT": pool.placement,
        "HEDWIG_ZK_SESSION_TIMEOUT_S": _number(pool.zk_session_timeout_s),
        # One balancer per pool: when the operator rebalances, the hubs' own shedding is off
        # (two policies with separate histories would fight over the same topics).
        "HEDWIG_SELF_BALANCE": "false" if pool.rebalancing.enabled else "true",
    }
    if pool.replication is not None:
        r = pool.replication
        env["HEDWIG_REPLICATION"] = f"{r.ensemble}/{r.write_quorum}/{r.ack_quorum}"
    if pool.max_message_size is not None:
        env["HEDWIG_MAX_MESSAGE_SIZE"] = str(pool.max_message_size)
    env.update(security_environment(pool, operator_principal))
    return env


def config_hash(data: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def build_configmap(pool: PoolSpec, operator_principal: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(pool, configmap_name(pool)),
        "data": hub_environment(pool, operator_principal),
    }
