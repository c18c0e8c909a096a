"""The operator's pools pin the hubs' key on their internal listener, and keep it.

A pool's hubs all present ``<pool>-hub-tls``; with ``spec.security.certManager`` its CA may
be a ClusterIssuer's, which signs for any namespace that may create a Certificate. So every
secured pool's hubs pin their own key (``HEDWIG_INTERNAL_PEER_KEYS=own``), whoever issued it,
and the key stays through renewals, the operator's and cert-manager's (``rotationPolicy:
Never``): renewed with a new key, hubs whose Secret files the kubelet had updated and those it
had not yet would refuse each other for a minute or two.
"""

from __future__ import annotations

import base64
import datetime as dt

from hedwig_operator.builders import build_configmap
from hedwig_operator.security import PoolTrust, ensure_pool_security
from hedwig_operator.specs import parse_pool

from hedwig.security.pins import spki_pin
from tests.operator.fakes import World, pool_body

SECURE = {"region": "r1", "security": {"enabled": True}}
CLUSTER_ISSUER = {
    "region": "r1",
    "security": {
        "enabled": True,
        "certManager": {"issuerRef": {"name": "shared", "kind": "ClusterIssuer"}},
    },
}


def test_every_secured_pool_pins_its_hubs_key() -> None:
    for spec in (SECURE, CLUSTER_ISSUER):
        env = build_configmap(parse_pool(pool_body(spec=spec)), "op")["data"]
        assert env["HEDWIG_INTERNAL_PEER_KEYS"] == "own"
    plain = build_configmap(parse_pool(pool_body(spec={"region": "r1"})))["data"]
    assert "HEDWIG_INTERNAL_PEER_KEYS" not in plain


async def test_the_key_stays_through_renewals() -> None:
    w = await World().start()
    pool = parse_pool(pool_body(spec=SECURE))
    await ensure_pool_security(w.kube, pool, PoolTrust())

    def hub_tls() -> dict[str, bytes]:
        body = w.kube.objects[("Secret", "ns", "pool-hub-tls")]
        return {k: base64.b64decode(v) for k, v in body["data"].items()}

    first = hub_tls()
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=70)  # inside the renewal window
    await ensure_pool_security(w.kube, pool, PoolTrust(), now=later)
    renewed = hub_tls()
    assert renewed["tls.crt"] != first["tls.crt"]
    assert spki_pin(renewed["tls.crt"]) == spki_pin(first["tls.crt"])
    # cert-manager is asked the same.
    managed = parse_pool(pool_body(spec=CLUSTER_ISSUER))
    await ensure_pool_security(w.kube, managed, PoolTrust())
    certificate = w.kube.objects[("Certificate", "ns", "pool-hub-tls")]
    assert certificate["spec"]["privateKey"]["rotationPolicy"] == "Never"
