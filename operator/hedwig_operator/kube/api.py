"""``KubeApi``: what the operator asks of the API server, and the errors it can get back."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

# Plural resource names of the kinds the operator touches (no discovery needed for these).
PLURALS: dict[str, str] = {
    "ConfigMap": "configmaps",
    "Service": "services",
    "StatefulSet": "statefulsets",
    "PodDisruptionBudget": "poddisruptionbudgets",
    "Event": "events",
    "Pod": "pods",
    "HubPool": "hubpools",
    "Topic": "topics",
    "HedwigUser": "hedwigusers",
    "HedwigNamespace": "hedwignamespaces",
    "Secret": "secrets",
    "Certificate": "certificates",
}


class KubeError(Exception):
    """The API server refused a request (``status`` is the HTTP status, 0 if unreachable)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """Enough of an object to address it, and to name it in an Event."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""


def ref_of(body: Mapping[str, Any]) -> ObjectRef:
    meta = body.get("metadata", {})
    return ObjectRef(
        api_version=str(body.get("apiVersion", "")),
        kind=str(body.get("kind", "")),
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
    )


def object_path(api_version: str, kind: str, namespace: str, name: str | None = None) -> str:
    """The REST path of a namespaced object (or of its collection when ``name`` is None)."""
    plural = PLURALS.get(kind)
    if plural is None:
        raise ValueError(f"unknown kind {kind!r}")
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = f"{prefix}/namespaces/{namespace}/{plural}"
    return f"{path}/{name}" if name is not None else path


# Objects as a list call returns them (each with its apiVersion and kind filled in). An alias:
# in a class body below a method named ``list``, ``list[...]`` would name the method.
Objects = list[dict[str, Any]]


def selector_of(labels: Mapping[str, str]) -> str:
    """A label selector requiring every one of ``labels`` (``k=v,...``, sorted)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


class KubeApi(Protocol):
    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply as the operator's field manager, forcing conflicts (the operator
        owns its children's fields); returns the object as stored."""
        ...

    async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        """The object, or None if it does not exist."""
        ...

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        """JSON merge patch of the object's status subresource."""
        ...

    async def patch(self, ref: ObjectRef, body: Mapping[str, Any]) -> None:
        """JSON merge patch of the object itself (the scale-down writes ``spec.replicas``)."""
        ...

    async def create(self, manifest: Mapping[str, Any]) -> None:
        """Create an object (used for Events)."""
        ...

    async def list(
        self, api_version: str, kind: str, namespace: str, label_selector: Mapping[str, str]
    ) -> Objects:
        """The namespace's objects of ``kind`` carrying every label of ``label_selector``."""
        ...

    async def delete(self, ref: ObjectRef) -> None:
        """Delete the object (only if its uid is still ``ref.uid``, when given); one already
        gone is no error."""
        ...

    async def close(self) -> None: ...
