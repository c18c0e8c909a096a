"""``HttpKubeApi``: the ``KubeApi`` over aiohttp, with credentials found like kubectl does.

Credentials come from the official client's config loaders (in-cluster ServiceAccount first,
then ``$KUBECONFIG`` / ``~/.kube/config``) so tokens, client certificates and exec plugins work
as users expect; requests are made with aiohttp (which kopf already uses) so nothing blocks the
event loop. The in-cluster token is re-read when it rotates: the loader's refresh hook runs
on every request through ``auth_settings``.
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from typing import Any

import aiohttp

from hedwig_operator.kube.api import KubeError, ObjectRef, Objects, object_path, selector_of
from hedwig_operator.resources import FIELD_MANAGER

TIMEOUT_S = 30.0
# Objects per page of a list call (the API server's chunking; ``continue`` fetches the next).
LIST_PAGE = 500


class HttpKubeApi:
    def __init__(
        self,
        server: str,
        *,
        ssl_context: ssl.SSLContext | bool,
        auth_header: Any = None,
    ) -> None:
        self._server = server.rstrip("/")
        self._ssl = ssl_context
        # A callable returning the Authorization header value (or None for certificates).
        self._auth_header = auth_header
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    def from_environment(cls) -> HttpKubeApi:
        """In-cluster credentials if running in a pod, else the kubeconfig."""
        from kubernetes import client as kclient
        from kubernetes import config as kconfig

        cfg = kclient.Configuration()
        try:
            kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except kconfig.ConfigException:
            kconfig.load_kube_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        if cfg.verify_ssl:
            ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
        else:
            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
        if cfg.cert_file:
            ctx.load_cert_chain(cfg.cert_file, cfg.key_file)

        def auth() -> str | None:
            # Calls the loader's refresh hook, so a rotated token is picked up.
            bearer = cfg.auth_settings().get("BearerToken")
            value = bearer["value"] if bearer else None
            return str(value) if value else None

        return cls(str(cfg.host), ssl_context=ctx, auth_header=auth)

    async def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
                connector=aiohttp.TCPConnector(ssl=self._ssl),
            )
        return self._session

    async def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> dict[str, Any] | None:
        headers = {"Accept": "application/json"}
        if self._auth_header is not None:
            value = self._auth_header()
            if value:
                headers["Authorization"] = value
        data = None
        if body is not None:
            headers["Content-Type"] = content_type
            data = json.dumps(body)
        session = await self._http()
        try:
            async with session.request(
                method, self._server + path, data=data, params=params, headers=headers
            ) as resp:
                text = await resp.text()
                if resp.status >= 400:
                    reason, message = resp.reason or "", text
                    try:
                        status = json.loads(text)
                        reason = str(status.get("reason", reason))
                        message = str(status.get("message", text))
                    except (json.JSONDecodeError, AttributeError):
                        pass
                    raise KubeError(resp.status, reason, message)
                parsed = json.loads(text) if text else None
                return parsed if isinstance(parsed, dict) else None
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise KubeError(0, "Unreachable", f"{method} {path}: {exc!r}") from exc

    async def apply(self, manifest: Mapping[str, Any]) -> dict[str, Any]:
        meta = manifest["metadata"]
        path = object_path(
            str(manifest["apiVersion"]), str(manifest["kind"]), meta["namespace"], meta["name"]
        )
        got = await self._request(
            "PATCH",
            path,
            body=manifest,
            params={"fieldManager": FIELD_MANAGER, "force": "true"},
            # JSON is YAML: the apply endpoint takes it under the YAML media type.
            content_type="application/apply-patch+yaml",
        )
        return got or {}

    async def get(self, ref: ObjectRef) -> dict[str, Any] | None:
        try:
            return await self._request(
                "GET", object_path(ref.api_version, ref.kind, ref.namespace, ref.name)
            )
        except KubeError as exc:
            if exc.not_found:
                return None
            raise

    async def patch_status(self, ref: ObjectRef, status: Mapping[str, Any]) -> None:
        path = object_path(ref.api_version, ref.kind, ref.namespace, ref.name) + "/status"
        await self._request(
            "PATCH", path, body={"status": status}, content_type="application/merge-patch+json"
        )

    async def patch(self, ref: ObjectRef, body: Mapping[str, Any]) -> None:
        path = object_path(ref.api_version, ref.kind, ref.namespace, ref.name)
        await self._request("PATCH", path, body=body, content_type="application/merge-patch+json")

    async def create(self, manifest: Mapping[str, Any]) -> None:
        meta = manifest["metadata"]
        path = object_path(str(manifest["apiVersion"]), str(manifest["kind"]), meta["namespace"])
        await self._request("POST", path, body=manifest)

    async def post(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path`` and return the answer (a review's status, say)."""
        return await self._request("POST", path, body=body) or {}

    async def list(
        self, api_version: str, kind: str, namespace: str, label_selector: Mapping[str, str]
    ) -> Objects:
        path = object_path(api_version, kind, namespace)
        params = {"labelSelector": selector_of(label_selector), "limit": str(LIST_PAGE)}
        found: Objects = []
        while True:
            page = await self._request("GET", path, params=params) or {}
            for item in page.get("items") or []:
                # A list's items carry neither: they are the collection's.
                found.append({"apiVersion": api_version, "kind": kind, **item})
            more = (page.get("metadata") or {}).get("continue")
            if not more:
                return found
            params = {**params, "continue": str(more)}

    async def delete(self, ref: ObjectRef) -> None:
        path = object_path(ref.api_version, ref.kind, ref.namespace, ref.name)
        body: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions"}
        if ref.uid:
            body["preconditions"] = {"uid": ref.uid}
        try:
            await self._request("DELETE", path, body=body)
        except KubeError as exc:
            if not exc.not_found:
                raise

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
