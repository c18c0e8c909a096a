"""The development etcd as ``hedwig dev up --secure --store etcd`` runs it, probed from outside:
its peer port is TLS and admits only a certificate of the peer CA, which nobody else holds.

A single member never dials a peer, but its peer listener serves raft and ``/leases``, where
followers forward lease keep-alives to the leader: plaintext and unauthenticated, it renewed a
killed hub's lease for anyone, and with the lease the hub's claims stayed alive.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from pathlib import Path

import grpc  # type: ignore[import-untyped]
import pytest
from aetcd import rpc  # type: ignore[import-untyped]

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from tests.secured_etcd import secured_etcd

pytestmark = pytest.mark.integration


def _grant_lease(server: EtcdServer, security: DevSecurity, ttl_s: int) -> int:
    """A lease, as a hub's session makes one (here as etcd's administrator)."""
    sec = security.etcd_security()
    creds = grpc.ssl_channel_credentials(
        Path(sec.ca).read_bytes(),
        Path(sec.client_key).read_bytes(),
        Path(sec.client_cert).read_bytes(),
    )
    with grpc.secure_channel(server.address, creds) as channel:
        auth = rpc.AuthStub(channel)
        token = auth.Authenticate(
            rpc.AuthenticateRequest(name="root", password=sec.root_password), timeout=10
        ).token
        granted = rpc.LeaseStub(channel).LeaseGrant(
            rpc.LeaseGrantRequest(TTL=ttl_s), metadata=(("token", token),), timeout=10
        )
        return int(granted.ID)


def _keep_alive(url: str, lease: int, context: ssl.SSLContext | None) -> int:
    """What a follower sends the leader's peer port: the lease's TTL after the renewal."""
    request = urllib.request.Request(
        f"{url}/leases",
        data=rpc.LeaseKeepAliveRequest(ID=lease).SerializeToString(),
        headers={"Content-Type": "application/protobuf"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5, context=context) as answer:
        renewed = rpc.LeaseKeepAliveResponse()
        renewed.ParseFromString(answer.read())
        return int(renewed.TTL)


def _any_server(cert: str | None = None, key: str | None = None) -> ssl.SSLContext:
    """A client that trusts whatever server it reaches (as a prober would)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def test_the_peer_port_renews_no_lease_for_anyone_outside(tmp_path: Path) -> None:
    security, server = secured_etcd(str(tmp_path))
    try:
        lease = _grant_lease(server, security, ttl_s=30)
        peer = server.peer_address
        # Plaintext: refused (the listener speaks TLS only).
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            _keep_alive(f"http://{peer}", lease, None)
        # TLS without a certificate, or with the store's client certificate that the env file
        # hands every command line user: refused in the handshake.
        for cert in (None, security.path("store.crt")):
            key = security.path("store.key") if cert else None
            with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
                _keep_alive(f"https://{peer}", lease, _any_server(cert, key))
        # A peer (the peer CA's certificate) is served: the endpoint is there, and guarded.
        member = ssl.create_default_context(cafile=security.path("store-peer-ca.crt"))
        member.load_cert_chain(security.path("store-peer.crt"), security.path("store-peer.key"))
        assert _keep_alive(f"https://{peer}", lease, member) == 30
    finally:
        server.stop()
