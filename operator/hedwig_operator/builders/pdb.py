"""The pool's PodDisruptionBudget: one hub at a time may be evicted.

Each evicted hub hands its topics to the others; evicting several at once would move many
topics at the same moment onto fewer hubs (and, with 3/3/2 replication, could take two of a
ledger's replicas away together).
"""

from __future__ import annotations

from typing import Any

from hedwig_operator.builders.labels import child_metadata, pdb_name, selector_labels
from hedwig_operator.specs import PoolSpec


def build_pdb(pool: PoolSpec) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": child_metadata(pool, pdb_name(pool)),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(pool)},
        },
    }
