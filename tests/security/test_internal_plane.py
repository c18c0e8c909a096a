"""The hub-to-hub plane: closed to everyone but the region's hubs.

- With authentication on, a hub refuses to start with an internal listener that has no TLS:
  it took whoever connected for a hub and served READ_ENTRY and DELETE_LEDGER to an anonymous
  plaintext client.
- With ``internal_peer_keys``, a certificate of the hub CA is not enough: its key must be
  pinned. Every peer that passed the handshake was a hub, and with a shared issuer of the hub
  CA (a cert-manager ClusterIssuer) any workload that may create a Certificate held the
  storage plane.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from hedwig.clock import ManualClock
from hedwig.errors import TlsClosedError, UsageError
from hedwig.hub.reporting.disconnects import Disconnect
from hedwig.metadata.memory import MemoryBackend
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TcpNetwork
from hedwig.protocol import ReadEntry
from hedwig.security import ClientSecurity
from hedwig.security.ca import CertificateAuthority, IssuedCertificate
from hedwig.security.pins import PREVIOUS_KEY_S, KeyPins, parse_pins, spki_pin
from hedwig.settings import SecuritySettings
from tests.security.conftest import SecureRegion, running_hubs, secure_config
from tests.security.fixtures import Pki, TokenIssuer
from tests.security.test_probes import seed


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
    SecuritySettings(**settings)  # type: ignore[arg-type]
    for name in missing:
        settings[name] = None
    if missing == ("internal_listen",):
        # Its TLS alone is refused first: it is for the listener.
        for name in ("internal_ca", "internal_cert", "internal_key"):
            settings[name] = None
    with pytest.raises(UsageError, match="internal listener with its TLS"):
        SecuritySettings(**settings)  # type: ignore[arg-type]


# Pinned keys --------------------------------------------------------------------------------


@pytest.fixture
async def pinned(pki: Pki, issuer: TokenIssuer) -> AsyncIterator[SecureRegion]:
    """Two secured hubs sharing one certificate, as an operator's pool does, pinning its key."""
    region = SecureRegion(pki, issuer, MemoryBackend())
    configs = (secure_config(pki, issuer, internal_peer_keys="own") for _ in range(2))
    async with running_hubs(region.hubs, configs, region.store):
        yield region


def another_workloads_certificate(pki: Pki, tmp_path: Path) -> ClientSecurity:
    """What anyone may get from a shared issuer of the hub CA (a cert-manager ClusterIssuer
    signs any namespace's Certificate): the hubs' own names, its own key."""
    pki.hub_ca.issue(
        "hub", ip_addresses=["127.0.0.1"], dns_names=["localhost"], server=True, client=True
    ).write(tmp_path, "workload")
    return ClientSecurity.build(
        tls_ca=pki.path("hub-ca.crt"),
        cert=str(tmp_path / "workload.crt"),
        key=str(tmp_path / "workload.key"),
    )


async def read_entry_at(address: str, security: ClientSecurity, ledger_id: int) -> None:
    assert security.tls is not None
    conn = await HubConnection.open(address, network=TcpNetwork(client_tls=security.tls))
    try:
        await conn.request(ReadEntry(request_id=conn.next_id(), ledger_id=ledger_id, entry_id=0), 5)
    finally:
        conn.close()


async def test_a_certificate_of_the_hub_ca_with_another_key_is_no_hub(
    pinned: SecureRegion, tmp_path: Path
) -> None:
    ledger_id = await seed(pinned)  # 2/2/2: the hubs replicate to each other, pinned
    workload = another_workloads_certificate(pinned.pki, tmp_path)
    for hub in pinned.hubs:
        # Closed as soon as its handshake is done: to the client, a refused certificate.
        with pytest.raises(TlsClosedError):
            await read_entry_at(hub.internal_address, workload, ledger_id)
        closed = hub.metrics.connections_closed.labels(Disconnect.PEER_KEY.value)
        assert closed._value.get() == 1
    # A hub's own certificate is admitted (what its peers present).
    await read_entry_at(pinned.hubs[0].internal_address, pinned.security(cert="hub"), ledger_id)


async def test_without_a_pin_any_certificate_of_the_hub_ca_is_a_hub(
    secure: SecureRegion, tmp_path: Path
) -> None:
    """Why the pin: where the hub CA is shared, its certificates read the storage plane."""
    ledger_id = await seed(secure)
    workload = another_workloads_certificate(secure.pki, tmp_path)
    await read_entry_at(secure.hubs[0].internal_address, workload, ledger_id)


def test_pinned_keys_follow_a_new_own_key_and_admit_the_old_one_a_while(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("hub ca")
    old = ca.issue("hub", server=True, client=True)
    new = ca.issue("hub", server=True, client=True)
    other = ca.issue("hub", server=True, client=True)
    listed = ca.issue("other hub", server=True, client=True)
    cert = tmp_path / "tls.crt"
    cert.write_bytes(old.cert_pem)
    clock = ManualClock()
    pins, own = parse_pins(f"own, {spki_pin(listed.cert_pem)}")
    assert own
    keys = KeyPins(pins, own_cert=str(cert), clock=clock)

    def der(issued: IssuedCertificate) -> bytes:
        return x509.load_pem_x509_certificate(issued.cert_pem).public_bytes(Encoding.DER)

    assert keys.admits(der(old)) and keys.admits(der(listed))
    assert not keys.admits(der(new)) and not keys.admits(der(other)) and not keys.admits(None)
    cert.write_bytes(new.cert_pem)
    os.utime(cert, (1, 1))  # a new mtime, whatever the file system's resolution
    keys.refresh()
    assert keys.own == spki_pin(new.cert_pem)
    assert keys.admits(der(new)) and keys.admits(der(old)) and not keys.admits(der(other))
    clock.advance(PREVIOUS_KEY_S + 1)
    assert not keys.admits(der(old)) and keys.admits(der(new))


def test_malformed_pins_and_pins_without_tls_are_refused(pki: Pki) -> None:
    for bad in ("sha256/not base64!", "sha256/" + "A" * 8, "md5/abc", "mine"):
        with pytest.raises(UsageError):
            parse_pins(bad)
    with pytest.raises(UsageError, match="internal_peer_keys"):
        SecuritySettings(internal_listen="127.0.0.1:0", internal_peer_keys="own")
