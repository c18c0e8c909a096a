"""Options shared by the client-side commands: where the hubs are."""

from __future__ import annotations

import argparse
import asyncio

from hedwig.errors import UsageError
from hedwig.metadata import open_store
from hedwig.security.credentials import POD_TOKEN_FILE, ClientSecurity


def add_hub_options(p: argparse.ArgumentParser, *, zk_required: bool = False) -> None:
    p.add_argument("--hub", help="any hub's HOST:PORT (comma-separated for several)")
    p.add_argument("--zk", required=zk_required, help="ZooKeeper HOST:PORT, to find hubs")
    p.add_argument("--region", default="dev", help="region (default: dev, as hedwig dev up)")
    add_security_options(p)


def add_security_options(p: argparse.ArgumentParser) -> None:
    """TLS and credentials for reaching secured hubs (docs/security.md)."""
    g = p.add_argument_group(
        "security",
        "Each option can also be set as HEDWIG_TLS, HEDWIG_TLS_CA, HEDWIG_CERT, HEDWIG_KEY or "
        "HEDWIG_TOKEN_FILE; inside a pod the projected token at "
        f"{POD_TOKEN_FILE} is used when no token is named.",
    )
    g.add_argument("--tls", action="store_true", default=None, help="connect with TLS")
    g.add_argument("--tls-ca", help="CA certificates (PEM) the hubs' certificates come from")
    g.add_argument("--cert", help="client certificate (PEM): authenticate with it")
    g.add_argument("--key", help="the client certificate's private key (PEM)")
    g.add_argument("--token-file", help="a token (JWT, e.g. a ServiceAccount token) to present")


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """The command's TLS and credentials, from its options, else ``HEDWIG_*`` variables."""
    return ClientSecurity.from_env(
        tls=getattr(args, "tls", None),
        tls_ca=getattr(args, "tls_ca", None),
        cert=getattr(args, "cert", None),
        key=getattr(args, "key", None),
        token_file=getattr(args, "token_file", None),
    )


async def alive_hubs(zk: str, region: str) -> list[str]:
    store = open_store(zk, region=region)
    await store.start()
    try:
        return [h.address for h in await store.hubs.list_hubs() if h.alive]
    finally:
        await store.close()


def resolve_hubs(args: argparse.Namespace) -> list[str]:
    if args.hub:
        return [h for h in args.hub.split(",") if h]
    if args.zk:
        hubs = asyncio.run(alive_hubs(args.zk, args.region))
        if not hubs:
            raise UsageError(f"no alive hub in region {args.region!r} at {args.zk}")
        return hubs
    raise UsageError("give --hub HOST:PORT or --zk HOST:PORT")
