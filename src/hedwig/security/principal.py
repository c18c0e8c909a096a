"""Who a connection acts as: a principal, and how it proved it.

Principal names are what ACL rules and ``super_users`` match, so two ways of proving an
identity must never arrive at the same name: a trusted issuer's token with ``sub: admin`` once
became the super-user ``admin`` that a client certificate named. The names therefore come in
namespaces that cannot meet, as the Kubernetes API server keeps its own apart (an OpenID
Connect user is ``<issuer URL>#<sub>`` unless told otherwise, a ServiceAccount
``system:serviceaccount:...``, a certificate its common name):

- a JWT of a trusted issuer: ``<issuer>#<sub>`` by default (``TokenIssuer.principal_prefix``;
  a prefix of one's own must hold a ``#`` too);
- a Kubernetes ServiceAccount token: ``system:serviceaccount:<namespace>:<name>``, its ``sub``
  as it is (the cluster's issuer is configured with an empty prefix: Kubernetes keeps that
  namespace to its ServiceAccounts);
- a TLS client certificate: the subject's common name (else its first URI or DNS name), which
  may hold no ``#`` and may not start with ``system:serviceaccount:``: a certificate naming
  either names no principal (``certificate_may_name``);
- a hub of the region on the internal listener: ``hub:<its certificate's name>``;
- ``anonymous`` when security is off.

(Kafka keeps its apart by form, ``User:CN=...,O=...`` for certificates and ``User:<name>``
for SASL; Pulsar's roles share one namespace, a certificate's CN and a token's ``sub`` alike.)
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

# Between a token issuer's prefix and its subject; no certificate's name holds one.
ISSUER_SEPARATOR = "#"
# The names Kubernetes gives ServiceAccounts (the ``sub`` of their tokens).
SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"


def certificate_may_name(name: str) -> bool:
    """Whether a certificate may name ``name``: not if tokens name principals that way."""
    return ISSUER_SEPARATOR not in name and not name.startswith(SERVICE_ACCOUNT_PREFIX)


class PrincipalKind(str, Enum):
    ANONYMOUS = "anonymous"
    TOKEN = "token"
    CERTIFICATE = "certificate"
    HUB = "hub"


@dataclass(frozen=True, slots=True)
class Principal:
    name: str
    kind: PrincipalKind
    # When the credentials stop being valid, in milliseconds since the epoch (0: never).
    expires_ms: int = 0

    @property
    def anonymous(self) -> bool:
        return self.kind is PrincipalKind.ANONYMOUS

    def __str__(self) -> str:
        return self.name


ANONYMOUS = Principal("anonymous", PrincipalKind.ANONYMOUS)
