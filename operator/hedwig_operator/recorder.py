"""Posting Events without letting a lost event fail the work it describes."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from hedwig_operator.kube import KubeApi, KubeError, ObjectRef, build_event, ref_of

log = logging.getLogger(__name__)


async def record_event(
    kube: KubeApi,
    target: Mapping[str, Any] | ObjectRef,
    reason: str,
    message: str,
    *,
    warning: bool = False,
) -> None:
    ref = target if isinstance(target, ObjectRef) else ref_of(target)
    event = build_event(
        ref, reason=reason, message=message, type_="Warning" if warning else "Normal"
    )
    try:
        await kube.create(event)
    except KubeError as exc:
        log.warning("could not record event %s on %s %s: %s", reason, ref.kind, ref.name, exc)
