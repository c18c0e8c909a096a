"""``python -m hedwig_operator.metricsapi``: serve the external metrics API over TLS.

The front-proxy CA comes from ``--requestheader-client-ca-file`` (the chart mounts nothing for
it: read it from ``kube-system/extension-apiserver-authentication``, key
``requestheader-client-ca-file``, when the flag is not given, with the front proxy's names from
``requestheader-allowed-names`` unless ``--allowed-name`` is given). The API server is reached with
the pod's ServiceAccount (else ``$KUBECONFIG``) for that and for the SubjectAccessReviews.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
from collections.abc import Sequence

from aiohttp import web

from hedwig.security import ClientSecurity
from hedwig_operator.kube.api import ObjectRef
from hedwig_operator.kube.http import HttpKubeApi
from hedwig_operator.metricsapi.authz import SubjectAccessReviewer
from hedwig_operator.metricsapi.lookup import HubLookup
from hedwig_operator.metricsapi.server import make_app, server_ssl


async def _front_proxy(api: HttpKubeApi) -> tuple[str, list[str]]:
    """The front proxy's CA (written to a file) and its allowed names, as the API server
    publishes them."""
    cm = await api.get(
        ObjectRef("v1", "ConfigMap", "kube-system", "extension-apiserver-authentication")
    )
    data = (cm or {}).get("data") or {}
    pem = data.get("requestheader-client-ca-file", "")
    if not pem:
        raise SystemExit("no requestheader-client-ca-file in extension-apiserver-authentication")
    with tempfile.NamedTemporaryFile("w", suffix=".crt", delete=False) as f:
        f.write(pem)
    names = json.loads(data.get("requestheader-allowed-names") or "[]")
    return f.name, [str(n) for n in names]


async def _serve(args: argparse.Namespace) -> None:
    api = HttpKubeApi.from_environment()
    ca, names = args.requestheader_client_ca_file, args.allowed_name
    if not ca:
        # An empty published list: the API server takes any certificate of the CA; so do we.
        ca, published = await _front_proxy(api)
        names = names or published
    elif names is None:
        names = ["front-proxy-client"]  # kubeadm's name
    security = None
    if args.hub_ca_file or args.hub_token_file or args.hub_cert:
        security = ClientSecurity.build(
            tls_ca=args.hub_ca_file,
            token_file=args.hub_token_file,
            cert=args.hub_cert,
            key=args.hub_key,
        )
    lookup = HubLookup(args.hubs.split(","), security=security, timeout_s=args.timeout)
    app = make_app(lookup, authorizer=SubjectAccessReviewer(poster=api), allowed_names=names)
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
        help="front-proxy client certificate common name (repeatable); default: the API "
        "server's requestheader-allowed-names (front-proxy-client with "
        "--requestheader-client-ca-file)",
    )
    p.add_argument("--hub-ca-file", help="a secured pool's CA (TLS to the hubs)")
    p.add_argument(
        "--hub-token-file",
        help="a ServiceAccount token for a secured pool (its audience), re-read as it rotates",
    )
    p.add_argument("--hub-cert", help="a client certificate for a secured pool (a tls user)")
    p.add_argument("--hub-key", help="the key of --hub-cert")
    p.add_argument("--timeout", type=float, default=5.0, help="seconds per hub request")
    args = p.parse_args(argv)
    asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
