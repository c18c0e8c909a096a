"""Status conditions in the Kubernetes convention: type, status, reason, message, time.

``lastTransitionTime`` changes only when ``status`` does, so ``kubectl wait`` and users see
when a resource became ready, not when the operator last looked at it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any


def now_iso(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    type_: str,
    ok: bool,
    reason: str,
    message: str,
    previous: Sequence[Mapping[str, Any]] | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    status = "True" if ok else "False"
    transition = now_iso(now)
    for old in previous or ():
        if old.get("type") == type_ and old.get("status") == status:
            transition = str(old.get("lastTransitionTime") or transition)
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": transition,
    }


def find(conditions: Sequence[Mapping[str, Any]] | None, type_: str) -> Mapping[str, Any] | None:
    for c in conditions or ():
        if c.get("type") == type_:
            return c
    return None


def changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether writing ``new`` over ``old`` changes anything (so unchanged status is not
    patched every refresh, which would wake every watcher of the resource)."""
    if old is None:
        return True
    return any(old.get(k) != v for k, v in new.items())
