"""Authorization of the front proxy's requester: a ``SubjectAccessReview`` to the API server.

This is what Kubernetes asks of an extension API server ("Configure the Aggregation Layer",
kubernetes.io/docs/tasks/extend-kubernetes/configure-aggregation-layer/): having taken the
user from the front proxy's headers, it asks the API server whether that user may make the
request, with a ``SubjectAccessReview`` (allowed by the ``system:auth-delegator``
ClusterRole). The aggregator authorizes the request before proxying it too, but the extension
server cannot know how the API server in front of it is configured, so it checks itself, as
every server built on ``k8s.io/apiserver`` does (its delegating authorizer).

Rules:

- A metric request is the resource ``get`` of ``external.metrics.k8s.io/v1beta1`` resource
  METRIC in namespace NS; any other path (discovery) is a non-resource ``get`` of that path.
- The review carries the user, groups and extra attributes the front proxy named.
- Answers are kept ``ALLOWED_TTL_S`` / ``DENIED_TTL_S`` seconds (as the delegating authorizer's
  defaults, 10 s each) so an autoscaler polling every 15 s costs at most one review a period.
- The API server out of reach is ``ReviewError`` (the request is answered 503, not denied for
  good and not allowed).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from hedwig_operator.kube.api import KubeError

REVIEW_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
ALLOWED_TTL_S = 10.0
DENIED_TTL_S = 10.0


class ReviewError(Exception):
    """The API server did not answer the review."""


@dataclass(frozen=True, slots=True)
class Attributes:
    """Who asks for what: a resource (``resource`` set) or a non-resource ``path``."""

    user: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()
    verb: str = "get"
    group: str = ""
    version: str = ""
    namespace: str = ""
    resource: str = ""
    path: str = ""

    def __post_init__(self) -> None:
        if not self.user:
            raise ValueError("a review names a user")
        if bool(self.resource) == bool(self.path):
            raise ValueError("a review is of a resource or of a path, not both")


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str = ""


class Poster(Protocol):
    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...


class Authorizer(Protocol):
    async def authorize(self, attributes: Attributes) -> Decision: ...


def review_body(a: Attributes) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": a.user, "groups": list(a.groups)}
    if a.extra:
        spec["extra"] = {k: list(v) for k, v in a.extra}
    if a.resource:
        spec["resourceAttributes"] = {
            "verb": a.verb,
            "group": a.group,
            "version": a.version,
            "namespace": a.namespace,
            "resource": a.resource,
        }
    else:
        spec["nonResourceAttributes"] = {"verb": a.verb, "path": a.path}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class SubjectAccessReviewer:
    """Asks the API server (``poster``: ``HttpKubeApi``), keeping answers a little while."""

    def __init__(
        self,
        *,
        poster: Poster,
        clock: Callable[[], float] = time.monotonic,
        allowed_ttl_s: float = ALLOWED_TTL_S,
        denied_ttl_s: float = DENIED_TTL_S,
    ) -> None:
        self._poster = poster
        self._clock = clock
        self._allowed_ttl_s = allowed_ttl_s
        self._denied_ttl_s = denied_ttl_s
        self._cache: dict[Attributes, tuple[float, Decision]] = {}

    async def authorize(self, attributes: Attributes) -> Decision:
        now = self._clock()
        kept = self._cache.get(attributes)
        if kept is not None and kept[0] > now:
            return kept[1]
        try:
            answer = await self._poster.post(REVIEW_PATH, review_body(attributes))
        except KubeError as e:
            raise ReviewError(f"SubjectAccessReview: {e}") from e
        status = answer.get("status") or {}
        decision = Decision(
            allowed=bool(status.get("allowed")) and not status.get("denied"),
            reason=str(status.get("reason", "") or status.get("evaluationError", "")),
        )
        ttl = self._allowed_ttl_s if decision.allowed else self._denied_ttl_s
        if len(self._cache) > 1024:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        self._cache[attributes] = (now + ttl, decision)
        return decision
