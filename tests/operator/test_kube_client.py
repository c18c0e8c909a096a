"""``HttpKubeApi`` against a small fake API server: the requests it makes and its errors."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from hedwig_operator.kube import KubeError, ObjectRef, build_event, object_path
from hedwig_operator.kube.http import HttpKubeApi
from hedwig_operator.settings import OperatorSettings

from hedwig.errors import UsageError

STS = ObjectRef("apps/v1", "StatefulSet", "ns", "pool")


@pytest.fixture
async def server() -> AsyncIterator[tuple[HttpKubeApi, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.text()
        seen.append(
            {
                "method": request.method,
                "path": request.path,
                "query": dict(request.query),
                "type": request.headers.get("Content-Type"),
                "auth": request.headers.get("Authorization"),
                "body": json.loads(body) if body else None,
            }
        )
        if request.path.endswith("/missing"):
            return web.json_response(
                {"kind": "Status", "reason": "NotFound", "message": "not here"}, status=404
            )
        if request.path.endswith("/services") and request.method == "GET":
            # Two pages: the second one after the first's continue token.
            if request.query.get("continue") == "page-2":
                return web.json_response({"items": [{"metadata": {"name": "b"}}], "metadata": {}})
            return web.json_response(
                {"items": [{"metadata": {"name": "a"}}], "metadata": {"continue": "page-2"}}
            )
        if request.path.endswith("/forbidden"):
            return web.json_response(
                {"kind": "Status", "reason": "Forbidden", "message": "no"}, status=403
            )
        return web.json_response({"kind": "Thing", "echo": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    api = HttpKubeApi(f"http://127.0.0.1:{port}", ssl_context=False, auth_header=lambda: "Bearer t")
    yield api, seen
    await api.close()
    await runner.cleanup()


async def test_apply_is_a_forced_server_side_apply(server) -> None:  # type: ignore[no-untyped-def]
    api, seen = server
    manifest = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "pool", "namespace": "ns"},
    }
    assert await api.apply(manifest) == {"kind": "Thing", "echo": True}
    (req,) = seen
    assert req["method"] == "PATCH"
    assert req["path"] == "/apis/apps/v1/namespaces/ns/statefulsets/pool"
    assert req["query"] == {"fieldManager": "hedwig-operator", "force": "true"}
    assert req["type"] == "application/apply-patch+yaml"
    assert req["auth"] == "Bearer t"
    assert req["body"] == manifest


async def test_get_status_patch_and_create(server) -> None:  # type: ignore[no-untyped-def]
    api, seen = server
    assert await api.get(ObjectRef("v1", "Service", "ns", "missing")) is None
    with pytest.raises(KubeError) as err:
        await api.get(ObjectRef("v1", "Service", "ns", "forbidden"))
    assert (err.value.status, err.value.reason, err.value.message) == (403, "Forbidden", "no")
    await api.patch_status(STS, {"x": 1})
    assert seen[-1]["path"] == "/apis/apps/v1/namespaces/ns/statefulsets/pool/status"
    assert seen[-1]["type"] == "application/merge-patch+json"
    assert seen[-1]["body"] == {"status": {"x": 1}}
    await api.create(build_event(STS, reason="R", message="m"))
    assert seen[-1]["method"] == "POST"
    assert seen[-1]["path"] == "/api/v1/namespaces/ns/events"


async def test_list_follows_pages_and_delete_ignores_what_is_gone(server) -> None:  # type: ignore[no-untyped-def]
    api, seen = server
    found = await api.list("v1", "Service", "ns", {"b": "2", "a": "1"})
    assert found == [
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "b"}},
    ]
    assert [r["query"] for r in seen] == [
        {"labelSelector": "a=1,b=2", "limit": "500"},
        {"labelSelector": "a=1,b=2", "limit": "500", "continue": "page-2"},
    ]
    assert {r["path"] for r in seen} == {"/api/v1/namespaces/ns/services"}
    await api.delete(ObjectRef("v1", "Service", "ns", "pool-3-external", "uid-3"))
    assert seen[-1]["method"] == "DELETE"
    assert seen[-1]["path"] == "/api/v1/namespaces/ns/services/pool-3-external"
    assert seen[-1]["body"] == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "uid-3"},
    }
    await api.delete(ObjectRef("v1", "Service", "ns", "missing"))  # 404: already gone
    assert seen[-1]["body"] == {"apiVersion": "v1", "kind": "DeleteOptions"}
    with pytest.raises(KubeError) as err:
        await api.delete(ObjectRef("v1", "Service", "ns", "forbidden"))
    assert err.value.status == 403


async def test_unreachable_server_is_a_kube_error() -> None:
    api = HttpKubeApi("http://127.0.0.1:1", ssl_context=False)
    with pytest.raises(KubeError) as err:
        await api.get(STS)
    assert err.value.status == 0
    await api.close()


def test_paths_and_events() -> None:
    assert object_path("v1", "ConfigMap", "ns", "c") == "/api/v1/namespaces/ns/configmaps/c"
    assert object_path("hedwig.io/v1alpha1", "Topic", "ns") == (
        "/apis/hedwig.io/v1alpha1/namespaces/ns/topics"
    )
    event = build_event(STS, reason="TopicMoved", message="x" * 5000, type_="Warning")
    assert len(event["message"]) == 1024
    assert event["involvedObject"]["kind"] == "StatefulSet"
    assert event["type"] == "Warning"
    assert event["metadata"]["name"].startswith("pool.")


def test_settings_from_environment() -> None:
    s = OperatorSettings.from_env(
        {"HEDWIG_OPERATOR_STATUS_INTERVAL_S": "2.5", "HEDWIG_OPERATOR_REBALANCING_ENABLED": "no"}
    )
    assert s.status_interval_s == 2.5
    assert s.rebalancing_enabled is False
    assert OperatorSettings.from_env({}) == OperatorSettings()
    renamed = OperatorSettings.from_env({"HEDWIG_OPERATOR_ZK_SESSION_TIMEOUT_S": "4"})
    assert renamed.metadata_session_timeout_s == 4.0  # the older name, an alias
    with pytest.raises(UsageError, match="HEDWIG_OPERATOR_RETRY_DELAY_S"):
        OperatorSettings.from_env({"HEDWIG_OPERATOR_RETRY_DELAY_S": "soon"})
