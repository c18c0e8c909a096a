"""What the client-side commands share: where the hubs are, and how failures are told.

Where the hubs are, in this order: ``--hub`` (or ``HEDWIG_HUB``), the alive hubs the metadata
store lists (``--metadata`` or ``HEDWIG_METADATA``, ``--zk``/``HEDWIG_ZK`` as aliases, with
``--region``/``HEDWIG_REGION``: the hub's own declarations of them), and last the
development cluster ``hedwig dev up`` is running on this machine (it leaves its endpoints in a
state file), so that the commands of the README work as pasted.

Failures are told as ``hedwig COMMAND: what happened`` and, where there is one, what to do next;
the exit status is 2 for a command used wrongly, 1 for anything else that failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from hedwig.cli.reach import HubsUnreachableError, check_hubs
from hedwig.errors import (
    ConnectionLostError,
    DeadlineExceededError,
    ForbiddenError,
    HedwigError,
    InvalidTopicError,
    MetadataRefusedError,
    MetadataUnavailableError,
    NoSuchSubscriptionError,
    NoSuchTopicError,
    SubscriptionBusyError,
    TopicInUseError,
    UsageError,
)
from hedwig.metadata import open_store
from hedwig.net.transport import split_address
from hedwig.security.credentials import POD_TOKEN_FILE, ClientSecurity
from hedwig.settings import HubConfig, add_flag, from_environment, lookup

# The one region default of every component (hubs, commands, the Spark source, the operator).
DEFAULT_REGION = "default"


def dev_state_path() -> Path:
    """Where ``hedwig dev up`` leaves its endpoints for the other commands."""
    override = os.environ.get("HEDWIG_DEV_STATE")
    if override:
        return Path(override)
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or Path.home() / ".cache")
    return base / "hedwig" / "dev-cluster.json"


def read_dev_state() -> dict[str, Any] | None:
    try:
        state: dict[str, Any] = json.loads(dev_state_path().read_text())
    except (OSError, ValueError):
        return None
    return state


def dev_region(state: dict[str, Any] | None, args: argparse.Namespace) -> dict[str, Any] | None:
    """The development cluster's region ``--region`` names when ``hedwig dev up --regions``
    runs several (``regions`` in its state), else the cluster the state describes."""
    if state is None:
        return None
    picked = (state.get("regions") or {}).get(getattr(args, "region", None))
    return picked if isinstance(picked, dict) else state


def add_hub_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--hub",
        default=os.environ.get("HEDWIG_HUB"),
        help="any hub's HOST:PORT, comma-separated for several (env HEDWIG_HUB)",
    )
    add_metadata_options(p)
    add_security_options(p)


def add_security_options(p: argparse.ArgumentParser) -> None:
    """TLS and credentials for reaching secured hubs (docs/security.md)."""
    g = p.add_argument_group(
        "security",
        "Each option can also be set as HEDWIG_TLS, HEDWIG_TLS_CA, HEDWIG_CERT, HEDWIG_KEY (for "
        "--cert-key) or "
        "HEDWIG_TOKEN_FILE; inside a pod the projected token at "
        f"{POD_TOKEN_FILE} is used when no token is named.",
    )
    g.add_argument("--tls", action="store_true", default=None, help="connect with TLS")
    g.add_argument("--tls-ca", help="CA certificates (PEM) the hubs' certificates come from")
    g.add_argument("--cert", help="client certificate (PEM): authenticate with it")
    # Not --key: that is a message's key (hedwig pub --key).
    g.add_argument("--cert-key", dest="cert_key", help="the client certificate's private key (PEM)")
    g.add_argument("--token-file", help="a token (JWT, e.g. a ServiceAccount token) to present")


def client_security(args: argparse.Namespace) -> ClientSecurity:
    """The command's TLS and credentials, from its options, else ``HEDWIG_*`` variables."""
    return ClientSecurity.from_env(
        tls=getattr(args, "tls", None),
        tls_ca=getattr(args, "tls_ca", None),
        cert=getattr(args, "cert", None),
        key=getattr(args, "cert_key", None),
        token_file=getattr(args, "token_file", None),
    )


def add_metadata_options(p: argparse.ArgumentParser) -> None:
    """The hubs' metadata URL and region (their declarations: the same flags, variables and
    aliases as ``hedwig hub``), with the development cluster's store as the default."""
    metadata = lookup(HubConfig, "metadata_url")
    add_flag(
        p,
        metadata,
        default=from_environment(metadata),
        help=f"{metadata.setting.doc} (env {' or '.join(metadata.envs)}; default: the "
        "cluster 'hedwig dev up' runs)",
    )
    region = lookup(HubConfig, "region")
    add_flag(p, region, default=from_environment(region) or DEFAULT_REGION)


def add_json_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="machine-readable output (JSON)")


async def alive_hubs(metadata_url: str, region: str) -> list[str]:
    async with open_store(metadata_url, region=region) as store:
        return [h.address for h in await store.hubs.list_hubs() if h.alive]


def resolve_metadata(args: argparse.Namespace) -> str:
    """The metadata URL to use: ``--metadata``, else the development cluster's."""
    if args.metadata_url:
        return str(args.metadata_url)
    state = dev_region(read_dev_state(), args)
    if state and state.get("zk"):
        if args.region == DEFAULT_REGION and state.get("region"):
            args.region = state["region"]
        return str(state["zk"])
    raise UsageError(
        "no metadata store: give --metadata HOST:PORT (or set HEDWIG_METADATA), or start a "
        "local cluster with 'hedwig dev up'"
    )


def resolve_hubs(args: argparse.Namespace) -> list[str]:
    """The hubs to talk to, once one of them has answered (``reach``: an address that was
    never a hub's fails within seconds, saying what is there, not after the retry deadline)."""
    hubs = _hub_addresses(args)
    for address in hubs:
        split_address(address)  # HOST:PORT, or a UsageError before anything is dialled
    asyncio.run(check_hubs(hubs, client_security(args)))
    return hubs


def _hub_addresses(args: argparse.Namespace) -> list[str]:
    if args.hub:
        return [h.strip() for h in str(args.hub).split(",") if h.strip()]
    if args.metadata_url:
        hubs = asyncio.run(alive_hubs(args.metadata_url, args.region))
        if not hubs:
            raise UsageError(
                f"no alive hub in region {args.region!r} at {args.metadata_url} (is the region "
                "right? "
                "'hedwig hubs' lists what ZooKeeper knows)"
            )
        return hubs
    state = dev_region(read_dev_state(), args)
    if state and state.get("hubs"):
        return [str(h["address"]) for h in state["hubs"]]
    raise UsageError(
        "no hub to talk to: give --hub HOST:PORT (or set HEDWIG_HUB), or --metadata HOST:PORT to "
        "find the hubs, or start a local cluster with 'hedwig dev up'"
    )


_HINTS: list[tuple[type[HedwigError], str]] = [
    (NoSuchTopicError, "'hedwig topics' lists the topics; publishing creates one"),
    (NoSuchSubscriptionError, "'hedwig subscriptions TOPIC' lists its subscriptions"),
    (TopicInUseError, "--force closes the attached subscribers"),
    (
        SubscriptionBusyError,
        "another process is attached to it; 'hedwig sub TOPIC SUBSCRIBER --force-attach' takes "
        "it over (the other is closed), or use another subscriber name",
    ),
    (InvalidTopicError, "names are 1 to 255 bytes of printable UTF-8"),
    (
        ForbiddenError,
        "an ACL must allow it: 'hedwig acl add ENTRY --principal P --topic T --operations OP' "
        "(docs/security.md)",
    ),
    (
        MetadataUnavailableError,
        "is the metadata store running there (and, for a secured etcd, are HEDWIG_ETCD_CA, "
        "_CERT, _KEY and _CREDENTIALS set, as the credentials' env file sets them)? "
        "'hedwig dev up' starts one and hubs on this machine",
    ),
    (
        HubsUnreachableError,
        "check the address (--hub, HEDWIG_HUB): a hub's client port, 4080 in Kubernetes, "
        "24001... for 'hedwig dev up'; 'hedwig dev status' or 'hedwig hubs' lists them",
    ),
    (
        ConnectionLostError,
        "is a hub running there? 'hedwig dev up' starts ZooKeeper and hubs on this machine",
    ),
    (DeadlineExceededError, "the hubs did not answer in time; 'hedwig hubs' shows which are up"),
]


_STORE_REFUSAL_HINT = (
    "the metadata store refused this user: its tree is protected. Give the ZooKeeper digest "
    "as HEDWIG_ZK_DIGEST=USER:PASSWORD (the env file 'hedwig dev up --secure' prints sets it; "
    "under the operator it is in the Secret <pool>-zookeeper) or zk://USER:PASSWORD@HOST:PORT, "
    "or etcd's HEDWIG_ETCD_CREDENTIALS"
)


def hint_for(exc: BaseException) -> str | None:
    if isinstance(exc, MetadataRefusedError):
        return _STORE_REFUSAL_HINT
    for cls, hint in _HINTS:
        if isinstance(exc, cls):
            return hint
    return None


def report(command: str, exc: BaseException, where: str = "") -> int:
    """Tell the user what failed (``where``: which part of the input) and what to do next;
    the exit status."""
    hint = hint_for(exc)
    what = f"{where}: {exc}" if where else str(exc)
    print(f"hedwig {command}: {what}" + (f"\n  ({hint})" if hint else ""), file=sys.stderr)
    # 2: the command was used wrongly (plain UsageError); 1: anything else, a refused name or
    # message included (the input, not the command line, was at fault).
    return 2 if type(exc) is UsageError else 1
