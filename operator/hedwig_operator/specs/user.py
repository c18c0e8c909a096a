"""The HedwigUser spec: a user of one HubPool, how it authenticates, and its ACLs.

The principal a user's rules name follows from how it authenticates:

- ``serviceAccount``: ``system:serviceaccount:<namespace>:<serviceAccount>``, the ``sub`` of
  the ServiceAccount's tokens: any pod running as it is the user, with no secret to hand out;
- ``tls``: ``user:<namespace>:<name>``, the common name of the client certificate the operator
  issues into the Secret ``<name>-user-tls`` (so the user's name must leave room for the
  suffix within Kubernetes' 253 characters).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from hedwig.errors import MetadataError
from hedwig.metadata.acls import AclEntry, AclRule, Effect, Operation, PatternType, ResourceType
from hedwig_operator.resources import MAX_NAME, USER_SECRET_SUFFIX
from hedwig_operator.specs.common import Raw, SpecError, int_or, opt_str, req_str, section


class AuthenticationType(str, Enum):
    SERVICE_ACCOUNT = "serviceAccount"
    TLS = "tls"


@dataclass(frozen=True, slots=True)
class UserSpec:
    namespace: str
    name: str
    pool: str
    authentication: AuthenticationType
    service_account: str | None
    rules: tuple[AclRule, ...]
    uid: str = ""
    generation: int = 0

    @property
    def principal(self) -> str:
        if self.authentication is AuthenticationType.SERVICE_ACCOUNT:
            return f"system:serviceaccount:{self.namespace}:{self.service_account}"
        return f"user:{self.namespace}:{self.name}"

    @property
    def acl_name(self) -> str:
        """The ACL entry's name in the pool's region: one per user."""
        return f"{self.namespace}/{self.name}"

    @property
    def acl_entry(self) -> AclEntry:
        return AclEntry(self.rules, source=f"HedwigUser {self.namespace}/{self.name}")


def _rule(raw: Raw, principal: str, path: str) -> AclRule:
    resource = section(raw, "resource", path)
    ops = raw.get("operations")
    if not isinstance(ops, list) or not ops:
        raise SpecError(f"{path}.operations", "must list at least one operation")
    try:
        return AclRule(
            principal=principal,
            operations=frozenset(Operation(str(o)) for o in ops),
            resource=ResourceType(opt_str(resource, "type", f"{path}.resource") or "topic"),
            name=opt_str(resource, "name", f"{path}.resource") or "",
            pattern=PatternType(opt_str(resource, "patternType", f"{path}.resource") or "literal"),
            effect=Effect(opt_str(raw, "effect", path) or "allow"),
        )
    except (ValueError, MetadataError) as exc:
        raise SpecError(path, str(exc)) from exc


def parse_user(body: Raw) -> UserSpec:
    meta = section(body, "metadata", "")
    spec = section(body, "spec", "")
    auth = section(spec, "authentication", "spec")
    try:
        kind = AuthenticationType(req_str(auth, "type", "spec.authentication"))
    except ValueError as exc:
        raise SpecError("spec.authentication.type", "must be serviceAccount or tls") from exc
    service_account = opt_str(auth, "serviceAccount", "spec.authentication")
    if kind is AuthenticationType.SERVICE_ACCOUNT and not service_account:
        raise SpecError("spec.authentication.serviceAccount", "is required for serviceAccount")
    namespace = req_str(meta, "namespace", "metadata")
    name = req_str(meta, "name", "metadata")
    if kind is AuthenticationType.TLS and len(name) + len(USER_SECRET_SUFFIX) > MAX_NAME:
        raise SpecError(
            "metadata.name",
            f"a tls user's name may have at most {MAX_NAME - len(USER_SECRET_SUFFIX)} "
            f"characters (its Secret is <name>{USER_SECRET_SUFFIX})",
        )
    partial = UserSpec(namespace, name, "", kind, service_account, ())
    acls = section(spec, "authorization", "spec").get("acls") or []
    if not isinstance(acls, list):
        raise SpecError("spec.authorization.acls", "must be a list")
    rules = tuple(
        _rule(a, partial.principal, f"spec.authorization.acls[{i}]") for i, a in enumerate(acls)
    )
    return UserSpec(
        namespace=namespace,
        name=name,
        pool=req_str(spec, "pool", "spec"),
        authentication=kind,
        service_account=service_account,
        rules=rules,
        uid=opt_str(meta, "uid", "metadata") or "",
        generation=int_or(meta, "generation", "metadata", 0),
    )
