"""The pool's ConfigMap: the hub settings every pod shares, as ``HEDWIG_*`` variables.

The hub reads every setting from the environment, so the ConfigMap is mounted with
``envFrom`` and the pod template carries a hash of its data: a change of settings rolls the
pods, as it must, since hubs read them at start only. The settings are named as the hub
declares them (``hedwig.settings``): ``environment`` writes each as the variable, and in the
text, that the hub parses, so the operator keeps no list of names of its own.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hedwig.placement import PlacementPolicy
from hedwig.settings import HubConfig, environment
from hedwig_operator.builders.external import external_settings
from hedwig_operator.builders.labels import child_metadata, configmap_name
from hedwig_operator.builders.security import security_settings, store_environment
from hedwig_operator.resources import DATA_DIR, HUB_PORT, METRICS_PORT
from hedwig_operator.specs import PoolSpec


def hub_environment(pool: PoolSpec, operator_principal: str = "") -> dict[str, str]:
    """The settings shared by every hub of the pool (the advertised address is per pod);
    with ``spec.security``, TLS, authentication and ACLs with ``operator_principal`` (the
    operator's own) as a super-user."""
    settings: dict[str, object] = {
        "metadata_url": pool.metadata_url,
        "region": pool.region,
        "listen": f"0.0.0.0:{HUB_PORT}",
        "data_dir": DATA_DIR,
        "metrics_port": METRICS_PORT,
        # Probes come from the kubelet on the pod's IP, not from loopback.
        "metrics_host": "0.0.0.0",
        "policy": PlacementPolicy(pool.placement),
        "metadata_session_timeout_s": pool.metadata_session_timeout_s,
        # One balancer per pool: when the operator rebalances, the hubs' own shedding is off
        # (two policies with separate histories would fight over the same topics).
        "self_balance": not pool.rebalancing.enabled,
    }
    if pool.replication is not None:
        r = pool.replication
        settings["replication"] = f"{r.ensemble}/{r.write_quorum}/{r.ack_quorum}"
    if pool.max_message_size is not None:
        settings["max_message_size"] = pool.max_message_size
    settings.update(security_settings(pool, operator_principal))
    settings.update(external_settings(pool))
    env = environment(HubConfig, **settings)
    env.update(store_environment(pool))
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
