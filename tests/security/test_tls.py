"""Certificates rotate in place: a hub serves a renewed certificate to new connections without
restarting, and a client presents its renewed certificate on its next connection."""

from __future__ import annotations

import asyncio
import os
import shutil
import ssl
from pathlib import Path

import pytest
from cryptography import x509

from hedwig.client import HedwigClient
from hedwig.errors import UsageError
from hedwig.hub import Hub
from hedwig.metadata.memory import MemoryBackend
from hedwig.net.transport import TCP, TcpNetwork
from hedwig.security import ClientSecurity
from hedwig.security.ca import CertificateAuthority
from hedwig.security.tls import ReloadingCertificate, client_context
from tests.security.conftest import SecureRegion, secure_config
from tests.security.fixtures import Pki, TokenIssuer


def _renew(ca: CertificateAuthority, directory: Path, name: str, **kw: object) -> None:
    """Write a new certificate over the old files, a second later (mtime changes)."""
    issued = ca.issue(name, **kw)  # type: ignore[arg-type]
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    stamp = cert.stat().st_mtime + 1
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    os.utime(cert, (stamp, stamp))
    os.utime(key, (stamp, stamp))


def test_reloading_picks_up_rewritten_files(tmp_path: Path) -> None:
    ca = CertificateAuthority.create("test")
    ca.issue("alice", client=True).write(tmp_path, "alice")
    ctx = client_context(cert=str(tmp_path / "alice.crt"), key=str(tmp_path / "alice.key"))
    reloading = ReloadingCertificate(ctx, str(tmp_path / "alice.crt"), str(tmp_path / "alice.key"))
    assert not reloading.reload_if_changed()
    _renew(ca, tmp_path, "alice", client=True)
    assert reloading.reload_if_changed()
    assert not reloading.reload_if_changed()


async def test_a_hub_serves_its_renewed_certificate_without_restarting(
    pki: Pki, issuer: TokenIssuer, tmp_path: Path
) -> None:
    shutil.copy(pki.path("hub.crt"), tmp_path / "hub.crt")
    shutil.copy(pki.path("hub.key"), tmp_path / "hub.key")
    config = secure_config(
        pki,
        issuer,
        replication="1/1/1",
        tls_cert=str(tmp_path / "hub.crt"),
        tls_key=str(tmp_path / "hub.key"),
    )
    region = SecureRegion(pki, issuer, MemoryBackend())
    hub = Hub(config, store=region.store())
    await hub.start()
    try:
        before = await _served_serial(hub.address, pki)
        _renew(pki.hub_ca, tmp_path, "hub", ip_addresses=["127.0.0.1"], server=True, client=True)
        assert hub.tls is not None and hub.tls.reload() >= 1
        after = await _served_serial(hub.address, pki)
        assert after != before
    finally:
        await hub.stop()


async def _served_serial(address: str, pki: Pki) -> int:
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=pki.path("hub-ca.crt"))
    _, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    return int(x509.load_der_x509_certificate(der).serial_number)


def test_a_client_asked_for_tls_refuses_a_network_without_it(pki: Pki) -> None:
    """A plain TCP network given beside security that asks for TLS would send the client's
    token in the clear: refused at once, not silently plaintext."""
    security = ClientSecurity.build(tls_ca=pki.path("hub-ca.crt"), token="secret")
    with pytest.raises(UsageError, match="does none"):
        HedwigClient(["127.0.0.1:1"], security=security, network=TCP)
    with pytest.raises(UsageError, match="does none"):
        HedwigClient(["127.0.0.1:1"], security=security, network=TcpNetwork())
    # With TLS on the network it is what the client would have built itself.
    HedwigClient(["127.0.0.1:1"], security=security, network=TcpNetwork(client_tls=security.tls))


# ---------------------------------------------------------------- what a hub's TLS offers


def _offering(
    *, ciphers: str | None = None, group: str | None = None, tls12: bool = False
) -> ssl.SSLContext:
    """A client that offers only what it is given (trusting any server: a prober)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if tls12:
        ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    if ciphers:
        ctx.set_ciphers(ciphers)
    if group:
        ctx.set_ecdh_curve(group)
    return ctx


# How a refused handshake reaches the client: an alert, or the hub closing the connection.
REFUSED = (ssl.SSLError, ConnectionError)


async def _handshake(address: str, ctx: ssl.SSLContext) -> str:
    """The suite and protocol a hub agreed to with ``ctx`` (``REFUSED`` if none)."""
    host, port = address.rsplit(":", 1)
    _, writer = await asyncio.open_connection(host, int(port), ssl=ctx)
    tls = writer.get_extra_info("ssl_object")
    name, version, _ = tls.cipher()
    writer.close()
    return f"{name} {version}"


@pytest.mark.parametrize("cbc", ["ECDHE-ECDSA-AES128-SHA256", "ECDHE-ECDSA-AES256-SHA384"])
async def test_a_hub_refuses_a_tls12_client_that_offers_only_cbc(
    secure: SecureRegion, cbc: str
) -> None:
    address = secure.hubs[0].address
    with pytest.raises(REFUSED):
        await _handshake(address, _offering(ciphers=cbc, tls12=True))
    # The same client with an AEAD suite is served.
    agreed = await _handshake(
        address, _offering(ciphers="ECDHE-ECDSA-AES128-GCM-SHA256", tls12=True)
    )
    assert agreed == "ECDHE-ECDSA-AES128-GCM-SHA256 TLSv1.2"


@pytest.mark.parametrize("group", ["X448", "secp521r1"])
@pytest.mark.parametrize("tls12", [False, True], ids=["tls13", "tls12"])
async def test_a_hub_refuses_key_exchange_groups_it_does_not_offer(
    secure: SecureRegion, group: str, tls12: bool
) -> None:
    address = secure.hubs[0].address
    with pytest.raises(REFUSED):
        await _handshake(address, _offering(group=group, tls12=tls12))
    agreed = await _handshake(address, _offering(group="prime256v1", tls12=tls12))
    assert agreed.endswith("TLSv1.2" if tls12 else "TLSv1.3")


def test_every_context_offers_aead_suites_only(pki: Pki) -> None:
    from hedwig.security.tls import server_context

    contexts = [
        server_context(pki.path("hub.crt"), pki.path("hub.key")),
        server_context(
            pki.path("hub.crt"),
            pki.path("hub.key"),
            client_ca=pki.path("hub-ca.crt"),
            require_client_cert=True,
        ),
        client_context(pki.path("hub-ca.crt")),
    ]
    for ctx in contexts:
        suites = ctx.get_ciphers()
        assert suites and all(s["aead"] for s in suites), [s["name"] for s in suites]
        assert all(s["kea"] in ("kx-ecdhe", "kx-any") for s in suites)
