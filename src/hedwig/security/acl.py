"""Authorization decisions: may this principal do this operation on this topic (or cluster)?

``AclSet`` is an immutable snapshot of every rule of the region, indexed by principal, built
when the rules change (rarely) so that a decision (often) looks at only the rules that can
apply: those naming the principal exactly, and the few patterns. Rules: super-users may do
everything; a matching deny wins; else a matching allow; else the answer is no (default deny).
Connections cache decisions per topic (``hedwig.hub.front.access``), so even this runs once per
connection, topic and operation until the rules change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from hedwig.metadata.acls import (
    AclEntry,
    AclRule,
    Effect,
    Operation,
    PatternType,
    ResourceType,
)


def _covers(rule: AclRule, op: Operation, topic: str | None) -> bool:
    if op not in rule.operations:
        return False
    if topic is None:
        return rule.resource is ResourceType.CLUSTER
    if rule.resource is not ResourceType.TOPIC:
        return False
    if rule.pattern is PatternType.LITERAL:
        return rule.name == topic
    return topic.startswith(rule.name)


class AclSet:
    def __init__(
        self, entries: Mapping[str, AclEntry] = {}, *, super_users: Iterable[str] = ()
    ) -> None:
        self.super_users = frozenset(super_users)
        self.entries = dict(entries)
        self._exact: dict[str, list[AclRule]] = {}
        self._patterns: list[AclRule] = []
        for entry in self.entries.values():
            for rule in entry.rules:
                if rule.principal.endswith("*"):
                    self._patterns.append(rule)
                else:
                    self._exact.setdefault(rule.principal, []).append(rule)

    def _rules_for(self, principal: str) -> list[AclRule]:
        rules = list(self._exact.get(principal, ()))
        rules += [r for r in self._patterns if principal.startswith(r.principal[:-1])]
        return rules

    def allows(self, principal: str, op: Operation, topic: str | None) -> bool:
        """Whether ``principal`` may do ``op`` on ``topic`` (``None``: the cluster)."""
        if principal in self.super_users:
            return True
        allowed = False
        for rule in self._rules_for(principal):
            if _covers(rule, op, topic):
                if rule.effect is Effect.DENY:
                    return False
                allowed = True
        return allowed
