"""Access control entries, as stored under ``/hedwig/<region>/acls/<name>``.

An entry is a named group of rules (one per ``HedwigUser``, or one written by hand with
``hedwig acl``); hubs read every entry and watch them, so a change takes effect on open
connections within seconds. The decisions themselves are ``hedwig.security.acl``.

A rule, as Kafka's ACLs: a **principal** (exact, or a pattern ending in ``*``), a **resource**
(topics by literal name or by prefix, or the cluster), the **operations** it covers, and
whether it allows or denies them. Deny wins over allow; nothing allowed means denied.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import dump_object, load_object


class Operation(str, Enum):
    """What a rule allows. ``admin`` on a topic covers moving it; on the cluster, draining hubs
    and rebalancing. Subscribing covers consuming, closing and unsubscribing."""

    CREATE = "create"  # make a topic exist (topics are created by their first request)
    PUBLISH = "publish"
    SUBSCRIBE = "subscribe"
    READ = "read"  # read by sequence id without a subscription (batch readers)
    DESCRIBE = "describe"  # a topic's bounds and subscriber count
    ADMIN = "admin"


class ResourceType(str, Enum):
    TOPIC = "topic"
    CLUSTER = "cluster"


class PatternType(str, Enum):
    LITERAL = "literal"
    PREFIX = "prefix"


class Effect(str, Enum):
    ALLOW = "allow"
    DENY = "deny"


@dataclass(frozen=True, slots=True)
class AclRule:
    principal: str
    operations: frozenset[Operation]
    resource: ResourceType = ResourceType.TOPIC
    # The topic name, or its prefix ("" with PREFIX: every topic). Unused for the cluster.
    name: str = ""
    pattern: PatternType = PatternType.LITERAL
    effect: Effect = Effect.ALLOW

    def __post_init__(self) -> None:
        if not self.principal:
            raise MetadataError("an ACL rule needs a principal (or a pattern such as 'x:*')")
        if "*" in self.principal[:-1]:
            raise MetadataError(
                f"principal pattern {self.principal!r}: '*' may only end the pattern"
            )
        if not self.operations:
            raise MetadataError("an ACL rule needs at least one operation")
        if (
            self.resource is ResourceType.TOPIC
            and self.pattern is PatternType.LITERAL
            and not self.name
        ):
            raise MetadataError("a literal topic rule needs the topic's name")

    def to_dict(self) -> dict[str, Any]:
        return {
            "principal": self.principal,
            "operations": sorted(o.value for o in self.operations),
            "resource": self.resource.value,
            "name": self.name,
            "pattern": self.pattern.value,
            "effect": self.effect.value,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AclRule:
        try:
            return cls(
                principal=str(d["principal"]),
                operations=frozenset(Operation(o) for o in d["operations"]),
                resource=ResourceType(d.get("resource", "topic")),
                name=str(d.get("name", "")),
                pattern=PatternType(d.get("pattern", "literal")),
                effect=Effect(d.get("effect", "allow")),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise MetadataError(f"invalid ACL rule {d!r}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class AclEntry:
    """A named group of rules; ``source`` says who manages it (``HedwigUser ns/name``)."""

    rules: tuple[AclRule, ...]
    source: str = ""

    def to_json(self) -> bytes:
        return dump_object({"rules": [r.to_dict() for r in self.rules], "source": self.source})

    @classmethod
    def from_json(cls, raw: bytes) -> AclEntry:
        d = load_object(raw, "acl")
        rules = d.get("rules", [])
        if not isinstance(rules, list):
            raise MetadataError("corrupt acl record: rules is not a list")
        return cls(tuple(AclRule.from_dict(r) for r in rules), str(d.get("source", "")))
