"""The trust boundary: TLS, who a connection is, and what it may do.

- ``tls``: TLS contexts (TLS 1.2+) for listeners, clients and hubs; certificate reloading;
  principals from certificates.
- ``ca``: a small certificate authority (dev clusters, tests, the operator's per-pool CAs).
- ``tokens``: Kubernetes ServiceAccount tokens and JWTs, verified offline against their
  issuer's published keys.
- ``principal``: who a connection acts as.
- ``acl``: authorization decisions over the region's ACL rules (``hedwig.metadata.acls``).
- ``credentials``: what a client brings (``ClientSecurity``).

``docs/security.md`` has the threat model and how to run it.
"""

from hedwig.security.credentials import ClientSecurity, Credentials, StaticToken, TokenFile
from hedwig.security.principal import ANONYMOUS, Principal, PrincipalKind

__all__ = [
    "ANONYMOUS",
    "ClientSecurity",
    "Credentials",
    "Principal",
    "PrincipalKind",
    "StaticToken",
    "TokenFile",
]
