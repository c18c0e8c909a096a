"""``hedwig acl``: the region's ACL entries, by hand (the operator writes them from
``HedwigUser`` resources).

It finds the metadata store and the region as every other command does (``--zk``, else the
cluster ``hedwig dev up`` runs; region ``default``), so an entry added by hand lands where the
hubs read it. Writing needs the ZooKeeper digest credentials when the tree is protected
(``HEDWIG_ZK_DIGEST``, which the env file of ``hedwig dev up --secure`` sets, or
``zk://USER:PASSWORD@HOST:PORT``). ``add`` and ``delete`` say what they did; ``list`` takes
``--json``. A malformed rule (an unknown operation) is a command used wrongly: exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from hedwig.cli.common import add_json_option, add_zk_options, report, resolve_zk
from hedwig.errors import HedwigError, UsageError
from hedwig.metadata import open_store
from hedwig.metadata.acls import (
    AclEntry,
    AclRule,
    Effect,
    Operation,
    PatternType,
    ResourceType,
)
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("acl", help="list, add or delete ACL entries of a region")
    asub = p.add_subparsers(dest="acl_command", required=True, metavar="ACTION")
    for name, help_ in (
        ("list", "every entry and its rules"),
        ("add", "add a rule to an entry (created if new)"),
        ("delete", "delete an entry and its rules"),
    ):
        a = asub.add_parser(name, help=help_, description=__doc__)
        add_zk_options(a)
        if name == "list":
            add_json_option(a)
        else:
            a.add_argument("entry", help="the entry's name (e.g. NAMESPACE/USER)")
        if name == "add":
            a.add_argument("--principal", required=True, help="a principal, or a prefix and *")
            what = a.add_mutually_exclusive_group(required=True)
            what.add_argument("--topic", help="one topic by name")
            what.add_argument("--topic-prefix", help="every topic starting with this")
            what.add_argument("--cluster", action="store_true", help="the cluster (admin)")
            a.add_argument(
                "--operations",
                required=True,
                help="comma-separated: " + ", ".join(o.value for o in Operation),
            )
            a.add_argument("--deny", action="store_true", help="a deny rule (wins over allows)")
        a.set_defaults(func=run_acl)


def run_acl(args: argparse.Namespace) -> int:
    try:
        rule = _rule(args) if args.acl_command == "add" else None
        zk = resolve_zk(args)
        told = asyncio.run(_acl(args, zk, rule))
    except HedwigError as exc:
        return report(f"acl {args.acl_command}", exc)
    print(told)
    return 0


def _rule(args: argparse.Namespace) -> AclRule:
    names = [o.strip() for o in args.operations.split(",") if o.strip()]
    known = {o.value for o in Operation}
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise UsageError(
            f"--operations takes {', '.join(sorted(known))}; not {', '.join(unknown) or 'nothing'}"
        )
    if args.cluster:
        resource, name, pattern = ResourceType.CLUSTER, "", PatternType.LITERAL
    elif args.topic is not None:
        resource, name, pattern = ResourceType.TOPIC, args.topic, PatternType.LITERAL
    else:
        resource, name, pattern = ResourceType.TOPIC, args.topic_prefix, PatternType.PREFIX
    return AclRule(
        principal=args.principal,
        operations=frozenset(Operation(n) for n in names),
        resource=resource,
        name=name,
        pattern=pattern,
        effect=Effect.DENY if args.deny else Effect.ALLOW,
    )


def _target(r: AclRule) -> str:
    if r.resource is ResourceType.CLUSTER:
        return "cluster"
    return f"topic {r.name!r}" if r.pattern is PatternType.LITERAL else f"topics {r.name!r}*"


def _describe(r: AclRule) -> str:
    ops = ",".join(sorted(o.value for o in r.operations))
    return f"{r.effect.value} {r.principal} {ops} on {_target(r)}"


def _as_json(r: AclRule) -> dict[str, Any]:
    return {
        "effect": r.effect.value,
        "principal": r.principal,
        "operations": sorted(o.value for o in r.operations),
        "resource": r.resource.value,
        "name": r.name,
        "pattern": r.pattern.value,
    }


async def _acl(args: argparse.Namespace, zk: str, rule: AclRule | None) -> str:
    """Do what was asked; what to print."""
    async with open_store(zk, region=args.region) as store:
        if args.acl_command == "list":
            entries = sorted((await store.acls.list_acls()).items())
            if args.json:
                return json.dumps(
                    [
                        {
                            "entry": name,
                            "source": e.value.source,
                            "rules": [_as_json(r) for r in e.value.rules],
                        }
                        for name, e in entries
                    ],
                    indent=2,
                )
            lines = []
            for name, entry in entries:
                lines.append(f"{name}\t{entry.value.source}")
                lines += [f"\t{_describe(r)}" for r in entry.value.rules]
            return "\n".join(lines) or f"(no ACL entries in region {args.region!r})"
        if rule is not None:
            got = await store.acls.read_acl(args.entry)
            if got is None:
                await store.acls.write_acl(
                    args.entry, AclEntry((rule,), source="hedwig acl"), NEW_VERSION
                )
            else:
                grown = AclEntry((*got.value.rules, rule), source=got.value.source)
                await store.acls.write_acl(args.entry, grown, got.version)
            return f"ACL entry {args.entry} (region {args.region}): {_describe(rule)}"
        await store.acls.delete_acl(args.entry, ANY_VERSION)
        return f"deleted ACL entry {args.entry} (region {args.region})"
