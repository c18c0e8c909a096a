"""Who a connection acts as: a principal, and how it proved it.

Principal names are what ACL rules match:

- a Kubernetes ServiceAccount token: ``system:serviceaccount:<namespace>:<name>`` (its ``sub``);
- a JWT from another issuer: its ``sub`` claim, with the issuer's configured prefix;
- a TLS client certificate: the subject's common name (else its first URI or DNS name);
- a hub of the region on the internal listener: ``hub:<its certificate's name>``;
- ``anonymous`` when security is off.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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
