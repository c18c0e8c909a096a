"""Certificates, a token issuer with real OpenID Connect discovery, and secured hubs, for the
security tests.

The issuer serves ``/.well-known/openid-configuration`` and a JWKS on a loopback HTTP server,
as a Kubernetes API server does (``/openid/v1/jwks``), and signs tokens with its RSA key; the
hubs fetch and cache its keys exactly as they would the API server's.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa

from hedwig.security.ca import CertificateAuthority


class TokenIssuer:
    """An OpenID Connect issuer on loopback: discovery, JWKS, and signed tokens."""

    def __init__(self, kid: str = "key-1") -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.kid = kid
        self.fetches = 0
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path == "/.well-known/openid-configuration":
                    body: dict[str, Any] = {
                        "issuer": issuer.url,
                        "jwks_uri": f"{issuer.url}/openid/v1/jwks",
                        "id_token_signing_alg_values_supported": ["RS256"],
                    }
                elif self.path == "/openid/v1/jwks":
                    issuer.fetches += 1
                    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.key.public_key()))
                    jwk.update(kid=issuer.kid, use="sig", alg="RS256")
                    body = {"keys": [jwk]}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                return None

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def token(
        self,
        sub: str,
        *,
        audience: str = "hedwig",
        expires_in_s: float = 600,
        kid: str | None = None,
        key: rsa.RSAPrivateKey | None = None,
        issuer: str | None = None,
    ) -> str:
        now = int(time.time())
        claims = {
            "iss": issuer or self.url,
            "sub": sub,
            "aud": [audience],
            "iat": now,
            "nbf": now - 5,
            "exp": int(now + expires_in_s),
        }
        return jwt.encode(
            claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid}
        )

    def issuers_json(self, audience: str = "hedwig", *, prefix: str | None = "") -> str:
        """The hubs' ``token_issuers`` for this issuer. By default as the operator trusts the
        cluster's ServiceAccount issuer (no prefix: a token's ``sub`` is its principal, as the
        tests' ACLs name them); ``prefix=None`` leaves the prefix to its default
        (``<issuer>#``)."""
        entry: dict[str, Any] = {"issuer": self.url, "audience": audience}
        if prefix is not None:
            entry["principal_prefix"] = prefix
        return json.dumps([entry])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@dataclass
class Pki:
    """A hub CA, a client CA and a foreign CA, with certificates written under ``root``."""

    root: Path
    hub_ca: CertificateAuthority = field(init=False)
    client_ca: CertificateAuthority = field(init=False)
    foreign_ca: CertificateAuthority = field(init=False)

    def __post_init__(self) -> None:
        self.hub_ca = CertificateAuthority.create("hedwig hubs")
        self.client_ca = CertificateAuthority.create("hedwig clients")
        self.foreign_ca = CertificateAuthority.create("someone else")
        self.hub_ca.write(self.root, "hub-ca")
        self.client_ca.write(self.root, "client-ca")
        # Clients trust the hubs' serving certificates through the hub CA.
        self.hub_ca.issue(
            "hub", ip_addresses=["127.0.0.1"], dns_names=["localhost"], server=True, client=True
        ).write(self.root, "hub")
        self.client_ca.issue("alice", client=True).write(self.root, "alice")
        self.foreign_ca.issue("alice", client=True).write(self.root, "foreign-alice")
        self.foreign_ca.issue("hub", ip_addresses=["127.0.0.1"], server=True, client=True).write(
            self.root, "foreign-hub"
        )

    def path(self, name: str) -> str:
        return str(self.root / name)
