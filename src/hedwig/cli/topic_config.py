"""``hedwig topic create TOPIC [SETTINGS]`` and ``hedwig topic config TOPIC [SETTINGS]``: a
topic made explicitly, and its own settings (replication, retention, maximum message size,
expiry, the linked regions it is replicated from), by hand; the operator writes the same from
``Topic.spec`` (all but the regions).

Both write the topic's configuration record in the metadata store (``docs/operations.md``: a
topic's own settings win over the region's defaults, which win over the hubs' flags), as the
operator does, so they need the store's credentials where it is protected. ``create`` makes
the topic with its record (refused if it exists); ``config`` changes the record by
compare-and-set, read again when someone else wrote in between, and with no setting given
shows it. A setting left out keeps its value; ``--unset NAME`` gives it back to the region.
The owner reads a topic's settings when it takes the topic over: a change to an owned topic
applies at its next take-over (``hedwig move TOPIC`` makes one now), except replication, which
its next ledger takes.

Publishing to or subscribing to a topic that does not exist creates it, unless its namespace's
policy turns ``auto_create`` off (``hedwig namespaces``); a topic made here counts against its
namespace's ``max_topics`` as one a publish makes.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
from typing import Any

from hedwig.cli.common import add_json_option, add_metadata_options, report, resolve_metadata
from hedwig.errors import BadVersionError, HedwigError, NoSuchTopicError, UsageError
from hedwig.metadata import open_store
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import NEW_VERSION, TopicConfig
from hedwig.metadata.records.namespaces import counted_namespace
from hedwig.protocol import validate_name
from hedwig.settings import parse_replication

# Flag (without --) to the record's field, and what it takes.
SETTINGS = {
    "replication": ("replication", "ENSEMBLE/WRITE_QUORUM/ACK_QUORUM, e.g. 3/3/2"),
    "retention-ms": ("retention_ms", "milliseconds consumed messages stay readable by seq"),
    "retention-bytes": ("retention_bytes", "bytes of consumed messages kept for readers"),
    "max-message-size": ("max_message_size", "bytes; larger messages are refused"),
    "inactive-topic-expiry-ms": (
        "inactive_topic_expiry_ms",
        "milliseconds unused, with no subscription, before the topic is deleted",
    ),
    "subscription-expiry-ms": (
        "subscription_expiry_ms",
        "milliseconds unattached and unconsumed before a subscription is deleted",
    ),
    "regions": (
        "regions",
        "the linked regions this region replicates it from, comma-separated ('' for none; "
        "unset: every linked region)",
    ),
}
CONFLICT_RETRIES = 5


def register_topic_config(tsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, text in (
        ("create", "create a topic now, with settings of its own (refused if it exists)"),
        ("config", "show or change a topic's own settings (the rest are the region's)"),
    ):
        p = tsub.add_parser(name, help=text, description=__doc__)
        add_metadata_options(p)
        add_json_option(p)
        p.add_argument("topic")
        for flag, (_, meaning) in SETTINGS.items():
            p.add_argument(f"--{flag}", help=meaning)
        if name == "config":
            p.add_argument(
                "--unset",
                action="append",
                default=[],
                choices=list(SETTINGS),
                help="give this setting back to the region's default (repeatable)",
            )
        p.set_defaults(func=run_topic_config, config_command=name)


def topic_changes(args: argparse.Namespace) -> dict[str, Any]:
    """The record's fields to set (None: back to the region's), from the flags."""
    out: dict[str, Any] = {}
    for flag, (field, _) in SETTINGS.items():
        text = getattr(args, field)
        if text is None:
            continue
        if field == "replication":
            out[field] = parse_replication(text)
            continue
        if field == "regions":
            out[field] = tuple(r.strip() for r in text.split(",") if r.strip())
            continue
        try:
            value = int(text)
        except ValueError:
            raise UsageError(f"--{flag} takes a whole number, got {text!r}") from None
        if value < 0:
            raise UsageError(f"--{flag} must not be negative, got {value}")
        out[field] = value
    for flag in getattr(args, "unset", []):
        field = SETTINGS[flag][0]
        if field in out:
            raise UsageError(f"--{flag} and --unset {flag} together")
        out[field] = None
    return out


def describe(config: TopicConfig) -> dict[str, Any]:
    """The record's settings by flag name; None where the region's default applies."""
    d: dict[str, Any] = {}
    for flag, (field, _) in SETTINGS.items():
        value = getattr(config, field)
        if field == "replication" and value is not None:
            value = f"{value.ensemble}/{value.write_quorum}/{value.ack_quorum}"
        if field == "regions" and value is not None:
            value = ",".join(value)
        d[flag] = value
    return d


async def _apply(args: argparse.Namespace, zk: str, changes: dict[str, Any]) -> str:
    async with open_store(zk, region=args.region) as store:
        if args.config_command == "create":
            if await store.topics.topic_exists(args.topic):
                raise HedwigError(
                    f"topic {args.topic!r} exists; 'hedwig topic config {args.topic}' changes "
                    "its settings"
                )
            config = dataclasses.replace(TopicConfig(), **changes)
            await _count(store, args.topic)
            try:
                await store.topics.write_topic_config(args.topic, config, NEW_VERSION)
            except BadVersionError:
                raise HedwigError(f"topic {args.topic!r} was created meanwhile") from None
            return _told(args, f"created topic {args.topic}", config)
        for _ in range(CONFLICT_RETRIES):
            got = await store.topics.read_topic_config(args.topic)
            if got is None:
                raise NoSuchTopicError(
                    f"topic {args.topic!r} does not exist ('hedwig topic create {args.topic}' "
                    "makes it, with these settings)"
                )
            if not changes:
                return _told(args, f"topic {args.topic}", got.value)
            config = dataclasses.replace(got.value, **changes)
            try:
                await store.topics.write_topic_config(args.topic, config, got.version)
            except BadVersionError:
                continue  # written by someone else in between: read it again
            note = "applies at its next take-over ('hedwig move TOPIC' makes one now)"
            return _told(args, f"topic {args.topic}: {note}", config)
        raise HedwigError(f"the settings of topic {args.topic!r} kept changing under us")


async def _count(store: MetadataStore, topic: str) -> None:
    """A topic made here counts against its namespace's ``max_topics`` as one a publish makes
    (``QuotaExceededError`` at the limit)."""
    name = counted_namespace(topic)
    if name is not None:
        got = await store.namespaces.read_namespace(name)
        await store.namespaces.count_topic(name, topic, got.value.max_topics if got else None)


def _told(args: argparse.Namespace, head: str, config: TopicConfig) -> str:
    settings = describe(config)
    if args.json:
        return json.dumps({"topic": args.topic, **settings})
    lines = [head]
    width = max(len(k) for k in settings)
    for k, v in settings.items():
        lines.append(f"  {k:<{width}}  {'(region default)' if v is None else v}")
    return "\n".join(lines)


def run_topic_config(args: argparse.Namespace) -> int:
    command = f"topic {args.config_command}"
    try:
        validate_name(args.topic)
        changes = topic_changes(args)
        told = asyncio.run(_apply(args, resolve_metadata(args), changes))
    except HedwigError as exc:
        return report(command, exc)
    print(told)
    return 0
