"""``hedwig namespaces``: namespaces' policies by hand, and their usage against their limits.

``set TENANT/NAMESPACE`` writes the namespace's policy record in the metadata store (created if
new, else changed by compare-and-set, read again when someone else wrote in between): the
defaults of its topics (the flags of ``hedwig topic config``: replication, retention, maximum
message size, expiry; a topic's own settings win over them, they win over the region's) and its
own settings: ``--max-topics``, ``--max-subscriptions`` (per topic, held by its owner),
``--auto-create on|off``, and its publish rate quotas over all hubs: ``--max-publish-rate``
(messages a second) and ``--max-publish-bytes`` (payload bytes a second, with a unit if you
like: ``10MiB``, ``500KB``; 0: no limit), which slow publishers down past them (nothing is
refused or dropped). A setting left out keeps its value; ``--unset NAME`` takes it away.
``get`` shows one namespace, ``list`` every one that has a policy, each with its topics
counted against ``max_topics`` (every topic of a namespace but ``public/default`` is
counted); ``delete`` deletes a policy (its topics stay, counted). Every hub watches the
policies: a change applies to topics claimed after it, without restarts. Writing needs the
store's credentials where it is protected, as ``hedwig acl`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any

from hedwig.cli.common import add_json_option, add_metadata_options, report, resolve_metadata
from hedwig.cli.topic_config import SETTINGS, describe, topic_changes
from hedwig.errors import BadVersionError, HedwigError, UsageError
from hedwig.metadata import open_store
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import ANY_VERSION, NEW_VERSION
from hedwig.metadata.records.namespaces import NO_POLICY, NamespacePolicy, checked_namespace

# The namespace's own settings: flag (without --) to field.
OWN = {
    "max-topics": "max_topics",
    "max-subscriptions": "max_subscriptions",
    "max-publish-rate": "max_publish_msgs_per_s",
    "max-publish-bytes": "max_publish_bytes_per_s",
}
# Byte counts may carry a unit.
UNITS = {
    "": 1,
    "b": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
}
SWITCH = "auto-create"
CONFLICT_RETRIES = 5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("namespaces", help="namespaces' policies and quotas, and their usage")
    nsub = p.add_subparsers(dest="namespaces_command", required=True, metavar="ACTION")
    for name, help_ in (
        ("list", "every namespace with a policy, and its usage against its limits"),
        ("get", "one namespace's policy and usage"),
        ("set", "create or change a namespace's policy"),
        ("delete", "delete a namespace's policy (its topics stay)"),
    ):
        a = nsub.add_parser(name, help=help_, description=__doc__)
        add_metadata_options(a)
        add_json_option(a)
        if name != "list":
            a.add_argument("namespace", help="TENANT/NAMESPACE")
        if name == "set":
            for flag, (_, meaning) in SETTINGS.items():
                a.add_argument(f"--{flag}", help=f"its topics' default: {meaning}")
            a.add_argument("--max-topics", help="topics the namespace may hold")
            a.add_argument("--max-subscriptions", help="subscriptions each topic may hold")
            a.add_argument(
                "--max-publish-rate",
                dest="max_publish_msgs_per_s",
                metavar="N",
                help="messages a second published to its topics over all hubs (0: no limit)",
            )
            a.add_argument(
                "--max-publish-bytes",
                dest="max_publish_bytes_per_s",
                metavar="B",
                help="payload bytes a second published over all hubs, e.g. 10MiB (0: no limit)",
            )
            a.add_argument(
                f"--{SWITCH}",
                choices=["on", "off"],
                help="whether a publish or subscription creates a topic that does not exist",
            )
            a.add_argument(
                "--unset",
                action="append",
                default=[],
                choices=[*SETTINGS, *OWN, SWITCH],
                help="take this setting away (the region's default, or no limit; repeatable)",
            )
        a.set_defaults(func=run_namespaces)


def _changes(args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """The changes to the topics' defaults, and to the namespace's own settings."""
    unset = list(args.unset)
    topics = topic_changes(
        argparse.Namespace(
            **{f: getattr(args, f) for f, _ in SETTINGS.values()},
            unset=[u for u in unset if u in SETTINGS],
        )
    )
    own: dict[str, Any] = {}
    for flag, field in OWN.items():
        text = getattr(args, field)
        if text is None:
            continue
        value = parse_bytes(text, flag) if flag == "max-publish-bytes" else _whole(text, flag)
        if value < 0:
            raise UsageError(f"--{flag} must not be negative, got {value}")
        own[field] = value
    if args.auto_create is not None:
        own["auto_create"] = args.auto_create == "on"
    for flag in unset:
        if flag not in OWN and flag != SWITCH:
            continue
        field = OWN.get(flag, "auto_create")
        if field in own:
            raise UsageError(f"--{flag} and --unset {flag} together")
        own[field] = None
    return topics, own


def _whole(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UsageError(f"--{flag} takes a whole number, got {text!r}") from None


def parse_bytes(text: str, flag: str) -> int:
    """A byte count, with a unit if given (``10MiB``, ``500kb``, ``4096``)."""
    digits = text.strip()
    number = digits.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ")
    unit = digits[len(number) :].strip().lower()
    if unit not in UNITS or not number:
        raise UsageError(f"--{flag} takes a byte count, e.g. 1048576, 10MiB or 500KB; got {text!r}")
    try:
        value = float(number)
    except ValueError:
        raise UsageError(f"--{flag} takes a byte count, got {text!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise UsageError(f"--{flag} takes a byte count, got {text!r}")
    return int(value * UNITS[unit])


def _shown(name: str, policy: NamespacePolicy, count: int) -> dict[str, Any]:
    return {
        "namespace": name,
        "topics": count,
        "max_topics": policy.max_topics,
        "max_subscriptions": policy.max_subscriptions,
        "max_publish_msgs_per_s": policy.max_publish_msgs_per_s or None,
        "max_publish_bytes_per_s": policy.max_publish_bytes_per_s or None,
        "auto_create": policy.auto_create,
        "topic_defaults": describe(policy.topics),
    }


def _text(row: dict[str, Any]) -> str:
    limit = row["max_topics"]
    usage = f"{row['topics']}/{limit}" if limit is not None else f"{row['topics']} (no limit)"
    auto = {None: "on (region default)", True: "on", False: "off"}[row["auto_create"]]
    subs = row["max_subscriptions"]
    rate, size = row["max_publish_msgs_per_s"], row["max_publish_bytes_per_s"]
    lines = [
        row["namespace"],
        f"  topics             {usage}",
        f"  max-subscriptions  {'no limit' if subs is None else subs}",
        f"  max-publish-rate   {'no limit' if rate is None else f'{rate} msg/s'}",
        f"  max-publish-bytes  {'no limit' if size is None else f'{size} B/s'}",
        f"  auto-create        {auto}",
    ]
    lines += [
        f"  {flag:<{18}} {'(region default)' if v is None else v}"
        for flag, v in row["topic_defaults"].items()
    ]
    return "\n".join(lines)


async def _row(store: MetadataStore, name: str, policy: NamespacePolicy) -> dict[str, Any]:
    return _shown(name, policy, await store.namespaces.topic_count(name))


async def _run(args: argparse.Namespace, url: str) -> str:
    async with open_store(url, region=args.region) as store:
        ns = store.namespaces
        command = args.namespaces_command
        if command == "list":
            policies = await ns.list_namespaces()
            rows = [await _row(store, n, v.value) for n, v in sorted(policies.items())]
            if args.json:
                return json.dumps(rows, indent=2)
            return "\n".join(_text(r) for r in rows) or (
                f"(no namespace policies in region {args.region!r})"
            )
        name = checked_namespace(args.namespace)
        if command == "delete":
            try:
                await ns.delete_namespace(name, ANY_VERSION)
            except HedwigError:
                raise HedwigError(f"namespace {name!r} has no policy") from None
            return json.dumps({"deleted": name}) if args.json else f"deleted namespace {name}"
        if command == "get":
            got = await ns.read_namespace(name)
            row = await _row(store, name, NO_POLICY if got is None else got.value)
            return json.dumps(row) if args.json else _text(row)
        topics, own = _changes(args)
        for _ in range(CONFLICT_RETRIES):
            got = await ns.read_namespace(name)
            before = NO_POLICY if got is None else got.value
            policy = dataclasses.replace(
                before, topics=dataclasses.replace(before.topics, **topics), **own
            )
            try:
                await ns.write_namespace(name, policy, NEW_VERSION if got is None else got.version)
            except BadVersionError:
                continue  # written by someone else in between: read it again
            row = await _row(store, name, policy)
            return json.dumps(row) if args.json else _text(row)
        raise HedwigError(f"the policy of namespace {name!r} kept changing under us")


def run_namespaces(args: argparse.Namespace) -> int:
    try:
        told = asyncio.run(_run(args, resolve_metadata(args)))
    except HedwigError as exc:
        return report(f"namespaces {args.namespaces_command}", exc)
    print(told)
    return 0
