"""The external metrics API (hedwig_operator.metricsapi) against real hub processes: the
backlog and oldest-unacknowledged age of a subscription as its owner describes them, the
API's answers to good and bad requests, and unauthenticated requests refused."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from hedwig_operator.kube.http import HttpKubeApi
from hedwig_operator.metricsapi.authz import REVIEW_PATH, SubjectAccessReviewer
from hedwig_operator.metricsapi.lookup import (
    BACKLOG,
    OLDEST_UNACKED,
    HubLookup,
    NotFoundError,
    Selection,
    SelectorError,
    parse_selector,
)
from hedwig_operator.metricsapi.server import BASE, make_app, server_ssl

from hedwig.client import HedwigClient, SubscriptionType
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.zookeeper import free_port
from hedwig.security.ca import CertificateAuthority

pytestmark = pytest.mark.integration

TOPIC = "xm/jobs"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster(hubs=2, region="ext-metrics", session_timeout_s=3.0) as c:
        yield c


@pytest.fixture
async def lookup(cluster: DevCluster) -> AsyncIterator[HubLookup]:
    lk = HubLookup(cluster.addresses)
    yield lk
    await lk.close()


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("topic=a/b,subscription=s", Selection("a/b", "s")),
        ("subscription==s, topic==a/b", Selection("a/b", "s")),
    ],
)
def test_selectors_that_name_one_subscription(selector: str, expected: Selection) -> None:
    assert parse_selector(selector) == expected


@pytest.mark.parametrize(
    "selector",
    [
        "",
        "topic=a",
        "topic=a,subscription=s,app=x",
        "topic!=a,subscription=s",
        "topic in (a),subscription=s",
        "topic=a,topic=b,subscription=s",
        "topic=,subscription=s",
    ],
)
def test_selectors_refused(selector: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(selector)


async def test_backlog_and_oldest_age_from_the_owner(
    cluster: DevCluster, lookup: HubLookup
) -> None:
    sel = Selection(TOPIC, "workers")
    async with HedwigClient(cluster.addresses) as client:
        await client.create_subscription(TOPIC, "workers", type=SubscriptionType.SHARED)
        for i in range(7):
            await client.publish(TOPIC, b"m%d" % i)
        assert await lookup.value(BACKLOG, sel) == 7.0
        worker = await client.subscribe(TOPIC, "workers", type=SubscriptionType.SHARED)
        got = [await worker.next(10) for _ in range(3)]
        for m in got[:2]:
            worker.ack(m)
        await asyncio.sleep(0.3)
        # Two acknowledged; the third is held (in flight), the others wait.
        backlog = await lookup.value(BACKLOG, sel)
        assert 5.0 <= backlog <= 7.0
        assert await lookup.value(OLDEST_UNACKED, sel) >= 0.3
        with pytest.raises(NotFoundError):
            await lookup.value(BACKLOG, Selection(TOPIC, "nobody"))
        with pytest.raises(NotFoundError):
            await lookup.value(BACKLOG, Selection("xm/none", "workers"))
        with pytest.raises(NotFoundError):
            await lookup.value("cpu", sel)


async def test_requests_without_the_front_proxy_certificate_are_refused(
    lookup: HubLookup,
) -> None:
    # Nothing reaches the authorizer unauthenticated: it is a server nobody listens on.
    nowhere = SubjectAccessReviewer(
        poster=HttpKubeApi(f"http://127.0.0.1:{free_port()}", ssl_context=False)
    )
    async with TestClient(TestServer(make_app(lookup, authorizer=nowhere))) as http:
        assert (await http.get("/healthz")).status == 200
        for path in (BASE, f"{BASE}/namespaces/default/{BACKLOG}?labelSelector=topic=a"):
            resp = await http.get(path, headers={"X-Remote-User": "mallory"})
            assert resp.status == 401
            body = await resp.json()
            assert (body["kind"], body["code"]) == ("Status", 401)


def _pki(d: Path) -> None:
    """A CA; the server's certificate; front-proxy-client and someone-else signed by it."""
    ca = CertificateAuthority.create("test-ca", days=1)
    ca.write(d)
    ca.issue("server", ip_addresses=["127.0.0.1"], server=True, days=1).write(d, "server")
    for name in ("front-proxy-client", "someone-else"):
        ca.issue(name, client=True, days=1).write(d, name)


HPA_USER = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"


@pytest.fixture
async def reviews() -> AsyncIterator[tuple[HttpKubeApi, list[dict[str, Any]]]]:
    """A real HTTP server standing in for the API server's SubjectAccessReview endpoint
    only (the whole path through a real kube-apiserver is e2e/test_metrics_api.py): it allows
    the autoscaler's user `get` on external metrics in namespace apps, and the discovery path,
    and keeps every review it is sent."""
    seen: list[dict[str, Any]] = []

    async def review(request: web.Request) -> web.Response:
        body = await request.json()
        seen.append(body)
        spec = body["spec"]
        if spec["user"] == "while-the-api-server-fails":
            return web.json_response({"kind": "Status", "code": 500}, status=500)
        res = spec.get("resourceAttributes")
        allowed = spec["user"] == HPA_USER and (
            (res or {}).items()
            >= {
                "verb": "get",
                "group": "external.metrics.k8s.io",
                "version": "v1beta1",
                "namespace": "apps",
            }.items()
            or spec.get("nonResourceAttributes") == {"verb": "get", "path": BASE}
        )
        return web.json_response({**body, "status": {"allowed": allowed}}, status=201)

    app = web.Application()
    app.router.add_post(REVIEW_PATH, review)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    api = HttpKubeApi(f"http://127.0.0.1:{port}", ssl_context=False)
    try:
        yield api, seen
    finally:
        await api.close()
        await runner.cleanup()


async def test_the_api_over_tls_through_the_front_proxy(
    cluster: DevCluster,
    lookup: HubLookup,
    tmp_path: Path,
    reviews: tuple[HttpKubeApi, list[dict[str, Any]]],
) -> None:
    api, seen = reviews
    _pki(tmp_path)
    runner = web.AppRunner(make_app(lookup, authorizer=SubjectAccessReviewer(poster=api)))
    await runner.setup()
    port = free_port()
    ctx = server_ssl(
        str(tmp_path / "server.crt"), str(tmp_path / "server.key"), str(tmp_path / "ca.crt")
    )
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=ctx).start()

    def client_ctx(name: str | None) -> ssl.SSLContext:
        c = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        if name:
            c.load_cert_chain(str(tmp_path / f"{name}.crt"), str(tmp_path / f"{name}.key"))
        return c

    url = f"https://127.0.0.1:{port}"
    user = {
        "X-Remote-User": HPA_USER,
        "X-Remote-Group": "system:serviceaccounts",
        "X-Remote-Extra-Authentication.kubernetes.io%2fcredential-id": "JTI=1",
    }
    extra = {"authentication.kubernetes.io/credential-id": ["JTI=1"]}
    sel = f"topic={TOPIC}-tls,subscription=workers"
    try:
        async with HedwigClient(cluster.addresses) as client:
            await client.create_subscription(
                f"{TOPIC}-tls", "workers", type=SubscriptionType.SHARED
            )
            for i in range(4):
                await client.publish(f"{TOPIC}-tls", b"m%d" % i)
        async with aiohttp.ClientSession() as http:
            proxy = client_ctx("front-proxy-client")
            async with http.get(f"{url}{BASE}", ssl=proxy, headers=user) as r:
                assert r.status == 200
                names = {x["name"] for x in (await r.json())["resources"]}
                assert names == {BACKLOG, OLDEST_UNACKED}
            async with http.get(
                f"{url}{BASE}/namespaces/apps/{BACKLOG}",
                params={"labelSelector": sel},
                ssl=proxy,
                headers=user,
            ) as r:
                assert r.status == 200
                body = await r.json()
                assert body["kind"] == "ExternalMetricValueList"
                [item] = body["items"]
                assert (item["metricName"], item["value"]) == (BACKLOG, "4")
                assert item["metricLabels"] == {"topic": f"{TOPIC}-tls", "subscription": "workers"}
            for params, code in (
                ({"labelSelector": "topic=a"}, 400),
                ({"labelSelector": "app=x,topic=a,subscription=s"}, 400),
                ({"labelSelector": sel}, 404),
            ):
                metric = "cpu" if code == 404 else BACKLOG
                async with http.get(
                    f"{url}{BASE}/namespaces/apps/{metric}", params=params, ssl=proxy, headers=user
                ) as r:
                    assert r.status == code
                    assert (await r.json())["code"] == code
            # Vouched for by the front proxy, but not allowed by the API server.
            for who, ns in ((HPA_USER, "other"), ("mallory", "apps")):
                async with http.get(
                    f"{url}{BASE}/namespaces/{ns}/{BACKLOG}",
                    params={"labelSelector": sel},
                    ssl=proxy,
                    headers={"X-Remote-User": who},
                ) as r:
                    assert r.status == 403
                    body = await r.json()
                    assert (body["reason"], body["code"]) == ("Forbidden", 403)
                    assert who in body["message"]
            # The API server failing to review: unavailable, neither allowed nor denied.
            async with http.get(
                f"{url}{BASE}/namespaces/apps/{BACKLOG}",
                params={"labelSelector": sel},
                ssl=proxy,
                headers={"X-Remote-User": "while-the-api-server-fails"},
            ) as r:
                assert r.status == 503
                assert (await r.json())["reason"] == "ServiceUnavailable"
            # The reviews named the request and the front proxy's groups and extras.
            asked = [r["spec"] for r in seen]
            assert {
                "user": HPA_USER,
                "groups": ["system:serviceaccounts"],
                "extra": extra,
                "resourceAttributes": {
                    "verb": "get",
                    "group": "external.metrics.k8s.io",
                    "version": "v1beta1",
                    "namespace": "apps",
                    "resource": BACKLOG,
                },
            } in asked
            assert {
                "user": HPA_USER,
                "groups": ["system:serviceaccounts"],
                "extra": extra,
                "nonResourceAttributes": {"verb": "get", "path": BASE},
            } in asked
            # The same request again within the cache's lifetime asks no new review.
            before = len(seen)
            async with http.get(
                f"{url}{BASE}/namespaces/apps/{BACKLOG}",
                params={"labelSelector": sel},
                ssl=proxy,
                headers=user,
            ) as r:
                assert r.status == 200
            assert len(seen) == before
            # A certificate from the right CA but not the front proxy's, no user, no certificate.
            for ctx_, headers in (
                (client_ctx("someone-else"), user),
                (proxy, {}),
                (client_ctx(None), user),
            ):
                async with http.get(f"{url}{BASE}", ssl=ctx_, headers=headers) as r:
                    assert r.status == 401
    finally:
        await runner.cleanup()
