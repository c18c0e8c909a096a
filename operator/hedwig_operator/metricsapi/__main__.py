"""``python -m hedwig_operator.metricsapi``: serve the external metrics API over TLS.

The front-proxy CA comes from ``--requestheader-client-ca-file`` (the chart mounts nothing for
it: read it from ``kube-system/extension-apiserver-authentication``, key
``requestheader-client-ca-file``, when the flag is not given). The API server is reached with
the pod's ServiceAccount (else ``$KUBECONFIG``) for that and for the SubjectAccessReviews.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
from collections.abc import Sequence

from aiohttp import web

from hedwig_operator.kube.api import ObjectRef
from hedwig_operator.kube.http import HttpKubeApi
from hedwig_operator.metricsapi.authz import SubjectAccessReviewer
from hedwig_operator.metricsapi.lookup import HubLookup
from hedwig_operator.metricsapi.server import make_app, server_ssl


async def _front_proxy_ca(api: HttpKubeApi) -> str:
    cm = await api.get(
        ObjectRef("v1", "ConfigMap", "kube-system", "extension-apiserver-authentication")
    )
    pem = ((cm or {}).get("data") or {}).get("requestheader-client-ca-file", "")
    if not pem:
        raise SystemExit("no requestheader-client-ca-file in extension-apiserver-authentication")
    with tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False) as f:
        f.write(pem)
    return f.name


async def _serve(args: argparse.Namespace) -> None:
    api = HttpKubeApi.from_environment()
    ca = args.requestheader_client_ca_file or await _front_proxy_ca(api)
    lookup = HubLookup(args.hubs.split(","), timeout_s=args.timeout)
    app = make_app(
        lookup, authorizer=SubjectAccessReviewer(poster=api), allowed_names=args.allowed_name
    )
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(
        runner, args.host, args.port, ssl_context=server_ssl(args.tls_cert, args.tls_key, ca)
    )
    await site.start()
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()
        await lookup.close()
        await api.close()


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="hedwig_operator.metricsapi", description=__doc__)
    p.add_argument(
        "--hubs",
        default=os.environ.get("HEDWIG_HUBS", "127.0.0.1:4080"),
        help="hub addresses, comma-separated (any hub: requests follow redirects)",
    )
    p.add_argument("--host", default="0.0.0.0")
    p.add_argument("--port", type=int, default=6443)
    p.add_argument("--tls-cert", required=True)
    p.add_argument("--tls-key", required=True)
    p.add_argument("--requestheader-client-ca-file")
    p.add_argument(
        "--allowed-name",
        action="append",
        default=None,
        help="front-proxy client certificate common name (repeatable); default front-proxy-client",
    )
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per hub request")
    args = p.parse_args(argv)
    args.allowed_name = args.allowed_name or ["front-proxy-client"]
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
