"""``hedwig acl``: the region's ACL entries, by hand (the operator writes them from
``HedwigUser`` resources). Writing needs the ZooKeeper digest credentials when the tree is
protected (``HEDWIG_ZK_DIGEST`` or ``zk://USER:PASSWORD@HOST:PORT``)."""

from __future__ import annotations

import argparse
import asyncio
import sys

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
        a = asub.add_parser(name, help=help_)
        a.add_argument(
            "--zk",
            required=True,
            help="metadata store: ZooKeeper HOST:PORT, zk://... or etcd://...",
        )
        a.add_argument("--region", default="dev")
        if name != "list":
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
        asyncio.run(_acl(args))
    except HedwigError as exc:
        print(f"hedwig acl: {exc}", file=sys.stderr)
        return 1
    return 0


def _rule(args: argparse.Namespace) -> AclRule:
    try:
        ops = frozenset(Operation(o.strip()) for o in args.operations.split(",") if o.strip())
    except ValueError as exc:
        raise UsageError(f"--operations: {exc}") from exc
    if args.cluster:
        resource, name, pattern = ResourceType.CLUSTER, "", PatternType.LITERAL
    elif args.topic is not None:
        resource, name, pattern = ResourceType.TOPIC, args.topic, PatternType.LITERAL
    else:
        resource, name, pattern = ResourceType.TOPIC, args.topic_prefix, PatternType.PREFIX
    return AclRule(
        principal=args.principal,
        operations=ops,
        resource=resource,
        name=name,
        pattern=pattern,
        effect=Effect.DENY if args.deny else Effect.ALLOW,
    )


async def _acl(args: argparse.Namespace) -> None:
    async with open_store(args.zk, region=args.region) as store:
        if args.acl_command == "list":
            for name, entry in sorted((await store.acls.list_acls()).items()):
                print(f"{name}\t{entry.value.source}")
                for r in entry.value.rules:
                    target = (
                        "cluster"
                        if r.resource is ResourceType.CLUSTER
                        else (
                            f"topic {r.name!r}"
                            if r.pattern is PatternType.LITERAL
                            else f"topics {r.name!r}*"
                        )
                    )
                    ops = ",".join(sorted(o.value for o in r.operations))
                    print(f"\t{r.effect.value} {r.principal} {ops} on {target}")
        elif args.acl_command == "add":
            rule = _rule(args)
            got = await store.acls.read_acl(args.entry)
            if got is None:
                await store.acls.write_acl(
                    args.entry, AclEntry((rule,), source="hedwig acl"), NEW_VERSION
                )
            else:
                grown = AclEntry((*got.value.rules, rule), source=got.value.source)
                await store.acls.write_acl(args.entry, grown, got.version)
        else:
            await store.acls.delete_acl(args.entry, ANY_VERSION)
