"""A HubPool without ``spec.security`` refuses an anonymous connection.

A hub runs with the settings the operator writes for such a pool (its ConfigMap and its
container's own variables, read as a hub reads them at start). Only what is the cluster's
is replaced by this machine's: the files of its certificates (the mounted Secret), its
addresses (loopback instead of the pod's), the token issuer (the API server's) and the store.
Authentication, authorization, TLS and the internal listener are the operator's, and with them
a plaintext client is told to use TLS, an anonymous one is UNAUTHENTICATED and the storage
frames (DELETE_LEDGER) are INTERNAL_ONLY on the client listener.
"""

from __future__ import annotations

import shutil

from hedwig_operator.builders import build_configmap, build_statefulset
from hedwig_operator.resources import TLS_DIR
from hedwig_operator.specs import parse_pool

from hedwig.errors import AuthenticationError, InternalOnlyError
from hedwig.hub import Hub
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import DeleteLedger, DeleteTopic, Ping, Publish
from hedwig.security import ClientSecurity
from hedwig.settings import HubConfig, changed
from hedwig.settings.exposure import open_listeners
from tests import scratch
from tests.operator.fakes import pool_body
from tests.security.fixtures import Pki, TokenIssuer
from tests.security.test_probes import connect, expect_refused, probes


def operator_config(pki: Pki, issuer: TokenIssuer) -> HubConfig:
    pool = parse_pool(pool_body(security=None))
    data = build_configmap(pool, "system:serviceaccount:hedwig:hedwig-operator")["data"]
    container = build_statefulset(pool)["spec"]["template"]["spec"]["containers"][0]
    own = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = HubConfig.from_env({**data, **own})
    files = {
        f"{TLS_DIR}/tls.crt": pki.path("hub.crt"),
        f"{TLS_DIR}/tls.key": pki.path("hub.key"),
        f"{TLS_DIR}/ca.crt": pki.path("hub-ca.crt"),
        f"{TLS_DIR}/client-ca.crt": pki.path("client-ca.crt"),
    }
    sec = config.security
    return changed(
        config,
        listen="127.0.0.1:0",
        internal_listen="127.0.0.1:0",
        advertise=None,
        internal_advertise=None,
        metrics_port=None,
        data_dir=scratch.mkdtemp("pool-default-"),
        hub_id="pool-0",
        replication="1/1/1",
        token_issuers=issuer.issuers_json(),
        tls_cert=files[str(sec.tls_cert)],
        tls_key=files[str(sec.tls_key)],
        tls_client_ca=files[str(sec.tls_client_ca)],
        internal_ca=files[str(sec.internal_ca)],
        internal_cert=files[str(sec.internal_cert)],
        internal_key=files[str(sec.internal_key)],
    )


async def test_a_pool_without_spec_security_refuses_an_anonymous_connection(
    pki: Pki, issuer: TokenIssuer
) -> None:
    config = operator_config(pki, issuer)
    # As the operator wrote them: every listener secured, nothing told to run open.
    assert config.security.authenticate and config.security.authorize
    assert not config.security.insecure
    assert open_listeners(config) == []
    hub = Hub(config, store=MemoryMetadataStore(MemoryBackend(), "mem"))
    await hub.start()
    try:
        # Plaintext: told the port takes TLS only.
        conn = await HubConnection.open(hub.address)
        try:
            await expect_refused(conn, lambda rid: Ping(request_id=rid), AuthenticationError)
        finally:
            conn.close()
        # Anonymous over TLS: nothing but refusals, the storage role not served at all.
        anonymous = ClientSecurity.build(tls_ca=pki.path("hub-ca.crt"))
        for probe in probes(1):
            kind = type(probe(1))
            if kind not in (Publish, DeleteTopic, DeleteLedger):
                continue
            conn = await connect(hub.address, anonymous)
            try:
                expected = InternalOnlyError if kind is DeleteLedger else AuthenticationError
                await expect_refused(conn, probe, expected)
            finally:
                conn.close()
    finally:
        await hub.stop()
        shutil.rmtree(config.storage.data_dir, ignore_errors=True)
