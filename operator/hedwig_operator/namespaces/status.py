"""A HedwigNamespace's status: the Ready condition (reason and message), the namespace's
usage (its topics counted) against its limits (the quotas in force).

A merge patch: a field set to ``None`` is removed, so a limit taken away does not linger.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig_operator.conditions import condition


def build_namespace_status(
    *,
    generation: int,
    namespace_name: str | None,
    ready: bool,
    reason: str,
    message: str,
    previous: Mapping[str, Any] | None,
    policy: NamespacePolicy | None = None,
    topics: int | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The status (a merge patch); ``policy`` and ``topics`` once the record is in place."""
    previous = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "namespaceName": namespace_name,
        "conditions": [condition("Ready", ready, reason, message, previous.get("conditions"), now)],
    }
    if topics is not None:
        status["usage"] = {"topics": topics}
    if policy is not None:
        # Both keys always: None removes a limit that was taken away.
        status["limits"] = {
            "topics": policy.max_topics,
            "subscriptionsPerTopic": policy.max_subscriptions,
        }
    return status


def _pruned(value: Any) -> Any:
    """``value`` as the API server stores it after a merge patch: ``None`` fields gone."""
    if isinstance(value, Mapping):
        return {k: _pruned(v) for k, v in value.items() if v is not None}
    return value


def status_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether patching ``new`` over ``old`` changes anything (an unchanged status is not
    patched every refresh, which would wake every watcher of the resource)."""
    old = old or {}
    return any(
        (_pruned(v) if v is not None else None) != old.get(k)
        for k, v in new.items()
        if not (v is None and k not in old)
    )
