"""The hub-to-hub plane: closed to everyone but the region's hubs.

- With authentication on, a hub refuses to start with an internal listener that has no TLS:
  it took whoever connected for a hub and served READ_ENTRY and DELETE_LEDGER to an anonymous
  plaintext client.
"""

from __future__ import annotations

import pytest

from hedwig.errors import UsageError
from hedwig.hub import HubConfig
from tests.security.fixtures import Pki


@pytest.mark.parametrize(
    "missing", [("internal_ca", "internal_cert", "internal_key"), ("internal_listen",)]
)
def test_authentication_needs_the_internal_listener_with_its_tls(
    pki: Pki, missing: tuple[str, ...]
) -> None:
    settings: dict[str, object] = {
        "tls_cert": pki.path("hub.crt"),
        "tls_key": pki.path("hub.key"),
        "tls_client_ca": pki.path("client-ca.crt"),
        "internal_listen": "127.0.0.1:0",
        "internal_ca": pki.path("hub-ca.crt"),
        "internal_cert": pki.path("hub.crt"),
        "internal_key": pki.path("hub.key"),
        "authenticate": True,
    }
    HubConfig(**settings)  # type: ignore[arg-type]
    for name in missing:
        settings[name] = None
    if missing == ("internal_listen",):
        # Its TLS alone is refused first: it is for the listener.
        for name in ("internal_ca", "internal_cert", "internal_key"):
            settings[name] = None
    with pytest.raises(UsageError, match="internal listener with its TLS"):
        HubConfig(**settings)  # type: ignore[arg-type]
