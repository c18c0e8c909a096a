"""The aiohttp application serving ``external.metrics.k8s.io/v1beta1``.

aiohttp is already installed with the operator (kopf is built on it), is well kept, and
serves TLS with client certificates from a standard ``ssl.SSLContext``, so the server needs no
new dependency and no hand-written HTTP.

Rules:

- Every request but ``/healthz`` must come through the aggregation layer: TLS with a client
  certificate signed by the front-proxy CA (the ``requestheader-client-ca-file`` the API
  server publishes in ``kube-system/extension-apiserver-authentication``; the SSL context
  verifies it), whose common name is one of the allowed names, and the requester in
  ``X-Remote-User`` (groups in ``X-Remote-Group``, extra attributes in
  ``X-Remote-Extra-KEY``). Anything else is 401, with a ``Status`` body as the API server
  writes.
- The requester must then be allowed the request by the API server (``authz``: a
  SubjectAccessReview of ``get`` on the metric in the namespace, or of the discovery path):
  403 if not, 503 if the API server cannot be asked.
- Discovery (``/apis/external.metrics.k8s.io/v1beta1``) lists the metrics; a metric request
  answers an ``ExternalMetricValueList`` with one item, labelled with the selection.
- A bad selector is 400, an unknown metric, topic or subscription 404, hubs out of reach 503.
"""

from __future__ import annotations

import datetime
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

from aiohttp import web

from hedwig_operator.metricsapi.authz import Attributes, Authorizer, ReviewError
from hedwig_operator.metricsapi.lookup import (
    METRICS,
    NotFoundError,
    Selection,
    SelectorError,
    UnavailableError,
    parse_selector,
)

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
BASE = f"/apis/{GROUP}/{VERSION}"
USER_HEADER = "X-Remote-User"
GROUP_HEADER = "X-Remote-Group"
EXTRA_PREFIX = "x-remote-extra-"


class Lookup(Protocol):
    async def value(self, metric: str, selection: Selection) -> float: ...


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )


def _common_name(peercert: Any) -> str | None:
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def requester(request: web.Request, allowed_names: Collection[str]) -> str | None:
    """The user the front proxy vouches for, or None if the request is not from it."""
    transport = request.transport
    peercert = transport.get_extra_info("peercert") if transport is not None else None
    if not peercert:
        return None
    if allowed_names and _common_name(peercert) not in allowed_names:
        return None
    return request.headers.get(USER_HEADER) or None


def attributes(request: web.Request, user: str) -> Attributes:
    """What the request asks, for the API server to authorize (``authz.Attributes``)."""
    groups = tuple(request.headers.getall(GROUP_HEADER, ()))
    extra: dict[str, list[str]] = {}
    for key, value in request.headers.items():
        if key.lower().startswith(EXTRA_PREFIX):
            name = urllib.parse.unquote(key[len(EXTRA_PREFIX) :]).lower()
            extra.setdefault(name, []).append(value)
    extras = tuple(sorted((k, tuple(v)) for k, v in extra.items()))
    metric = request.match_info.get("metric")
    if metric is not None:
        return Attributes(
            user=user,
            groups=groups,
            extra=extras,
            group=GROUP,
            version=VERSION,
            namespace=request.match_info["namespace"],
            resource=metric,
        )
    return Attributes(user=user, groups=groups, extra=extras, path=request.path)


def make_app(
    lookup: Lookup,
    *,
    authorizer: Authorizer,
    allowed_names: Collection[str] = ("front-proxy-client",),
) -> web.Application:
    @web.middleware
    async def authenticate(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path == "/healthz":
            return await handler(request)
        user = requester(request, allowed_names)
        if user is None:
            return _status(401, "Unauthorized", "requests must come through the API server")
        asked = attributes(request, user)
        try:
            decision = await authorizer.authorize(asked)
        except ReviewError as e:
            return _status(503, "ServiceUnavailable", str(e))
        if not decision.allowed:
            what = (
                f"get {asked.resource} in namespace {asked.namespace}"
                if asked.resource
                else f"get {asked.path}"
            )
            why = f": {decision.reason}" if decision.reason else ""
            return _status(403, "Forbidden", f"user {user!r} may not {what}{why}")
        return await handler(request)

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def discovery(_: web.Request) -> web.Response:
        resources = [
            {
                "name": m,
                "singularName": "",
                "namespaced": True,
                "kind": "ExternalMetricValueList",
                "verbs": ["get"],
            }
            for m in METRICS
        ]
        return web.json_response(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": f"{GROUP}/{VERSION}",
                "resources": resources,
            }
        )

    async def metric(request: web.Request) -> web.Response:
        name = request.match_info["metric"]
        try:
            selection = parse_selector(request.query.get("labelSelector", ""))
            value = await lookup.value(name, selection)
        except SelectorError as e:
            return _status(400, "BadRequest", str(e))
        except NotFoundError as e:
            return _status(404, "NotFound", str(e))
        except UnavailableError as e:
            return _status(503, "ServiceUnavailable", str(e))
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        item = {
            "metricName": name,
            "metricLabels": {"topic": selection.topic, "subscription": selection.subscription},
            "timestamp": now,
            "value": _quantity(value),
        }
        return web.json_response(
            {
                "kind": "ExternalMetricValueList",
                "apiVersion": f"{GROUP}/{VERSION}",
                "metadata": {},
                "items": [item],
            }
        )

    app = web.Application(middlewares=[authenticate])
    app.router.add_get("/healthz", healthz)
    app.router.add_get(BASE, discovery)
    app.router.add_get(BASE + "/namespaces/{namespace}/{metric}", metric)
    return app


def _quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in milli-units."""
    if value == int(value):
        return str(int(value))
    return f"{round(value * 1000)}m"


def server_ssl(cert_file: str, key_file: str, client_ca_file: str | None) -> ssl.SSLContext:
    """TLS with the serving certificate; client certificates verified by the front-proxy CA."""
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert_file, key_file)
    if client_ca_file:
        ctx.load_verify_locations(client_ca_file)
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx
