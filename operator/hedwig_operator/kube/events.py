"""Kubernetes Events as the operator records them (core/v1, which ``kubectl describe`` shows).

Every topic move becomes one Event on the Topic and one on the HubPool, with the policy's
reason in the message: users asked to see why a topic moved, not only that it did.
"""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

from hedwig_operator.kube.api import ObjectRef

COMPONENT = "hedwig-operator"
MAX_MESSAGE = 1024  # the API server truncates longer messages anyway


def build_event(
    ref: ObjectRef,
    *,
    reason: str,
    message: str,
    type_: str = "Normal",
    now: dt.datetime | None = None,
    instance: str = "",
) -> dict[str, Any]:
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 3] + "..."
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{ref.name}.{secrets.token_hex(8)}",
            "namespace": ref.namespace,
        },
        "involvedObject": {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "namespace": ref.namespace,
            "name": ref.name,
            "uid": ref.uid,
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "count": 1,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": instance or COMPONENT,
    }
