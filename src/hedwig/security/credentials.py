"""What a client brings: TLS settings and a token, from arguments, ``HEDWIG_*`` variables, or the
pod it runs in.

``ClientSecurity`` is what ``HedwigClient`` takes (``security=``), every CLI command builds (from
``--tls-ca``, ``--cert``, ``--cert-key``, ``--token-file``) and the Spark source and the operator
pass on. Nothing given means plaintext and anonymous, which a hub with security off accepts.

Tokens are read from their file each time a connection authenticates, because a projected
ServiceAccount token is rewritten by the kubelet before it expires: inside a pod whose
``HedwigUser`` projects a token at ``POD_TOKEN_FILE`` the client finds it without being told.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from hedwig.errors import UsageError
from hedwig.security.tls import ReloadingCertificate, client_context

# Where the chart and the operator's examples mount a projected token with audience "hedwig".
POD_TOKEN_FILE = "/var/run/secrets/hedwig/token"


class Credentials(Protocol):
    def token(self) -> str:
        """The token to authenticate with now."""
        ...


@dataclass(frozen=True, slots=True)
class TokenFile:
    """A token kept in a file (re-read each time: it may be rotated in place)."""

    path: str

    def token(self) -> str:
        try:
            return Path(self.path).read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read token file {self.path}: {exc}") from exc


@dataclass(frozen=True, slots=True)
class StaticToken:
    value: str

    def token(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """TLS (a context, or ``None`` for plaintext) and credentials (``None``: a certificate in
    the context, or anonymous)."""

    tls: ssl.SSLContext | None = None
    credentials: Credentials | None = None
    # Reloads the client certificate into ``tls`` when its files change (the operator renews
    # a tls user's Secret in place); checked before each new connection.
    reload: ReloadingCertificate | None = None

    @classmethod
    def build(
        cls,
        *,
        tls: bool = False,
        tls_ca: str | None = None,
        cert: str | None = None,
        key: str | None = None,
        token_file: str | None = None,
        token: str | None = None,
        check_hostname: bool = True,
    ) -> ClientSecurity:
        """TLS if asked, or if a CA or a client certificate is given; a token if given."""
        if key and not cert:
            raise UsageError("a client key needs its certificate (--cert)")
        context = None
        reload = None
        if tls or tls_ca or cert:
            context = client_context(tls_ca, cert=cert, key=key, check_hostname=check_hostname)
            if cert:
                reload = ReloadingCertificate(context, cert, key)
        creds: Credentials | None = None
        if token_file and token:
            raise UsageError("give a token or a token file, not both")
        if token_file:
            creds = TokenFile(token_file)
        elif token:
            creds = StaticToken(token)
        return cls(context, creds, reload)

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        pod_token_file: str = POD_TOKEN_FILE,
        **given: str | bool | None,
    ) -> ClientSecurity:
        """From ``given`` options, else ``HEDWIG_TLS``, ``HEDWIG_TLS_CA``, ``HEDWIG_CERT``,
        ``HEDWIG_KEY``, ``HEDWIG_TOKEN_FILE``, ``HEDWIG_TOKEN``; with no token named, the pod's
        projected token if there is one."""
        env = os.environ if environ is None else environ

        def pick(name: str) -> str | None:
            value = given.get(name)
            if value is not None and value != "":
                return str(value)
            return env.get(f"HEDWIG_{name.upper()}") or None

        tls_flag = given.get("tls")
        tls = bool(tls_flag) or (env.get("HEDWIG_TLS", "").lower() in ("1", "true", "yes", "on"))
        token_file, token = pick("token_file"), pick("token")
        if token_file is None and token is None and os.path.isfile(pod_token_file):
            token_file = pod_token_file
        return cls.build(
            tls=tls,
            tls_ca=pick("tls_ca"),
            cert=pick("cert"),
            key=pick("key"),
            token_file=token_file,
            token=token,
        )
