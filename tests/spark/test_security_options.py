"""The data source's security options reach the client it connects with."""

from __future__ import annotations

import ssl

import pytest

from hedwig.security.ca import CertificateAuthority
from hedwig_spark.options import parse_cluster


def test_security_options_make_the_clients_tls_and_token(tmp_path: object) -> None:
    from pathlib import Path

    d = Path(str(tmp_path))
    CertificateAuthority.create("test").write(d, "ca")
    (d / "token").write_text("a.b.c\n")
    cluster = parse_cluster(
        {"hubs": "h:1", "tlscafile": str(d / "ca.crt"), "tokenfile": str(d / "token")}
    )
    security = cluster.security.client_security()
    assert isinstance(security.tls, ssl.SSLContext)
    assert security.credentials is not None and security.credentials.token() == "a.b.c"
    plain = parse_cluster({"hubs": "h:1"}).security
    assert not plain.tls and plain.tls_ca is None
    with pytest.raises(ValueError, match="'tls'"):
        parse_cluster({"hubs": "h:1", "tls": "maybe"})
