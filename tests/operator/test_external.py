"""``spec.external``: per-hub Services, the hubs' external settings, the certificate's names,
the load balancers' addresses read back, and ``status.external``, on the in-memory fakes."""

from __future__ import annotations

import base64
from typing import Any

import pytest
from cryptography import x509
from hedwig_operator.builders import build_configmap, build_pool_children, build_statefulset
from hedwig_operator.pools import apply_children, build_pool_status
from hedwig_operator.security import ensure_pool_security, names_changed
from hedwig_operator.specs import SpecError, parse_pool
from hedwig_operator.specs.external import DEFAULT_EXTERNAL_PORT

from hedwig.metadata import HubLoad, HubStatus
from hedwig.settings import HubConfig
from hedwig.settings.sources import load

from .fakes import World, pool_body
from .test_specs_and_crds import schema

NODE_PORT = {"type": "NodePort", "nodePortBase": 31000}
SECURED = {"enabled": True}


def pool(external: dict[str, Any], **spec: Any) -> Any:
    return parse_pool(pool_body(spec={"region": "r1", "external": external, **spec}))


def container(p: Any) -> dict[str, Any]:
    found: dict[str, Any] = build_statefulset(p)["spec"]["template"]["spec"]["containers"][0]
    return found


def env_of(p: Any) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container(p)["env"]}


def test_node_ports_give_each_hub_a_service_and_an_address_on_its_node() -> None:
    p = pool(NODE_PORT, replicas=3)
    services = [
        c
        for c in build_pool_children(p)
        if c["kind"] == "Service" and c["metadata"]["name"].endswith("-external")
    ]
    assert [s["metadata"]["name"] for s in services] == [
        "pool-0-external",
        "pool-1-external",
        "pool-2-external",
    ]
    one = services[1]["spec"]
    assert one["type"] == "NodePort"
    assert one["selector"] == {"statefulset.kubernetes.io/pod-name": "pool-1"}
    assert one["ports"] == [
        {
            "name": "external",
            "port": DEFAULT_EXTERNAL_PORT,
            "targetPort": "external",
            "protocol": "TCP",
            "nodePort": 31001,
        }
    ]
    env = env_of(p)
    assert env["HOST_IP"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    assert env["HEDWIG_EXTERNAL_ADVERTISE"] == (
        "pool-0=$(HOST_IP):31000,pool-1=$(HOST_IP):31001,pool-2=$(HOST_IP):31002"
    )
    # HOST_IP before the variable that names it: the kubelet expands earlier variables only.
    names = [e["name"] for e in container(p)["env"]]
    assert names.index("HOST_IP") < names.index("HEDWIG_EXTERNAL_ADVERTISE")
    assert {"name": "external", "containerPort": 4082, "protocol": "TCP"} in container(p)["ports"]
    data = build_configmap(p)["data"]
    assert data["HEDWIG_EXTERNAL_LISTEN"] == "0.0.0.0:4082"
    # What the hub of pod pool-1 reads (the kubelet having expanded HOST_IP).
    environ = {
        **data,
        "HEDWIG_EXTERNAL_ADVERTISE": env["HEDWIG_EXTERNAL_ADVERTISE"].replace(
            "$(HOST_IP)", "10.0.0.7"
        ),
    }
    config = load(HubConfig, environ)
    assert config.connection.external_address("pool-1") == "10.0.0.7:31001"


def test_an_autoscaled_pool_lists_every_hub_it_may_grow_to() -> None:
    p = pool(
        NODE_PORT, replicas=2, autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 4}
    )
    listed = env_of(p)["HEDWIG_EXTERNAL_ADVERTISE"].split(",")
    assert listed[-1] == "pool-3=$(HOST_IP):31003"
    grown = pool(
        NODE_PORT, replicas=3, autoscaling={"enabled": True, "minReplicas": 2, "maxReplicas": 4}
    )
    # Scaling out changes no hub's settings: the pods are not rolled for it.
    assert container(grown)["env"] == container(p)["env"]


def test_overrides_per_hub_and_a_pool_without_external_access() -> None:
    p = pool(
        {
            **NODE_PORT,
            "advertisedHost": "nodes.example.com",
            "hubs": [{"hub": 1, "nodePort": 32100, "advertisedHost": "proxy", "advertisedPort": 9}],
        },
        replicas=2,
    )
    env = env_of(p)
    assert "HOST_IP" not in env
    assert env["HEDWIG_EXTERNAL_ADVERTISE"] == "pool-0=nodes.example.com:31000,pool-1=proxy:9"
    nodeports = [
        c["spec"]["ports"][0]["nodePort"]
        for c in build_pool_children(p)
        if c["metadata"]["name"].endswith("-external")
    ]
    assert nodeports == [31000, 32100]
    plain = parse_pool(pool_body(spec={"region": "r1"}))
    assert not any(c["metadata"]["name"].endswith("-external") for c in build_pool_children(plain))
    assert "HEDWIG_EXTERNAL_ADVERTISE" not in env_of(plain)
    assert "HEDWIG_EXTERNAL_LISTEN" not in build_configmap(plain)["data"]


@pytest.mark.parametrize(
    ("external", "security", "path"),
    [
        ({"type": "Ingress"}, {}, "spec.external.type"),
        ({"type": "NodePort"}, {}, "spec.external.nodePortBase"),
        ({"type": "NodePort", "nodePortBase": 80}, {}, "spec.external.nodePortBase"),
        (NODE_PORT, SECURED, "spec.external.advertisedHost"),
        (
            {"type": "LoadBalancer", "hubs": [{"advertisedHost": "x"}]},
            {},
            "spec.external.hubs[0].hub",
        ),
    ],
)
def test_invalid_external_access_is_refused_naming_the_field(
    external: dict[str, Any], security: dict[str, Any], path: str
) -> None:
    with pytest.raises(SpecError) as err:
        pool(external, security=security)
    assert err.value.path == path


def test_the_crd_refuses_what_the_operator_refuses() -> None:
    root = schema("hubpools")
    ext = root["properties"]["spec"]["properties"]["external"]
    assert ext["properties"]["type"]["enum"] == ["NodePort", "LoadBalancer"]
    assert ext["properties"]["port"]["default"] == DEFAULT_EXTERNAL_PORT
    assert ext["properties"]["nodePortBase"]["minimum"] == 30000
    rules = [r["rule"] for r in ext["x-kubernetes-validations"]]
    assert "self.type != 'NodePort' || has(self.nodePortBase)" in rules
    assert any(
        "self.spec.external.advertisedHost" in r["rule"] for r in root["x-kubernetes-validations"]
    )


async def test_load_balancers_addresses_are_advertised_once_the_cloud_gives_them() -> None:
    w = await World().start()
    p = pool({"type": "LoadBalancer", "port": 7001}, replicas=2, security=SECURED)
    built = await apply_children(w.kube, p, w.trust)
    # No address yet: no external listener, nothing advertised, the certificate has no host.
    assert (
        "HEDWIG_EXTERNAL_LISTEN" not in w.kube.objects[("ConfigMap", "ns", "pool-config")]["data"]
    )
    assert build_pool_status(
        built, statefulset=None, hubs=[], zk_error=None, previous=None, now_ms=0
    )["external"] == {
        "type": "LoadBalancer",
        "hubs": [{"name": "pool-0", "address": ""}, {"name": "pool-1", "address": ""}],
        "bootstrap": "",
    }
    first = _hub_cert(w)
    # The cloud gives pool-0's Service an IP and pool-1's a name.
    for ordinal, ingress in ((0, {"ip": "203.0.113.5"}), (1, {"hostname": "lb-1.example.com"})):
        key = ("Service", "ns", f"pool-{ordinal}-external")
        w.kube.objects[key]["status"] = {"loadBalancer": {"ingress": [ingress]}}
    built = await apply_children(w.kube, p, w.trust)
    sts = w.kube.objects[("StatefulSet", "ns", "pool")]
    env = {
        e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert (
        env["HEDWIG_EXTERNAL_ADVERTISE"] == "pool-0=203.0.113.5:7001,pool-1=lb-1.example.com:7001"
    )
    assert w.kube.objects[("ConfigMap", "ns", "pool-config")]["data"]["HEDWIG_EXTERNAL_LISTEN"]
    assert w.kube.objects[("Service", "ns", "pool-0-external")]["spec"]["type"] == "LoadBalancer"
    # The certificate was issued again, with the new names, and the same key.
    cert = _hub_cert(w)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "lb-1.example.com" in sans.get_values_for_type(x509.DNSName)
    assert "203.0.113.5" in {str(a) for a in sans.get_values_for_type(x509.IPAddress)}
    assert cert.public_key() == first.public_key() and cert != first
    # The status: what each hub published wins over what it will publish.
    published = HubStatus(
        "pool-0.pool-headless.ns.svc:4080",
        True,
        load=HubLoad(hub_id="pool-0", external="203.0.113.5:7001"),
    )
    status = build_pool_status(
        built, statefulset=None, hubs=[published], zk_error=None, previous=None, now_ms=0
    )
    assert status["external"]["bootstrap"] == "203.0.113.5:7001,lb-1.example.com:7001"
    assert status["hubs"][0]["externalAddress"] == "203.0.113.5:7001"


async def test_a_secured_node_port_pool_certificate_names_its_advertised_host() -> None:
    w = await World().start()
    p = pool({**NODE_PORT, "advertisedHost": "10.245.0.1"}, security=SECURED)
    await ensure_pool_security(w.kube, p, w.trust)
    cert = _hub_cert(w)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(a) for a in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "10.245.0.1"}
    pem = _secret(w)["tls.crt"]
    dns = [str(n) for n in sans.get_values_for_type(x509.DNSName)]
    assert not names_changed(pem, dns, ["127.0.0.1", "10.245.0.1"])
    assert names_changed(pem, dns, ["127.0.0.1"])


async def test_cert_manager_is_asked_for_the_external_names_too() -> None:
    w = await World().start()
    security = {"enabled": True, "certManager": {"issuerRef": {"name": "ca"}}}
    p = pool({**NODE_PORT, "advertisedHost": "hubs.example.com"}, security=security)
    await ensure_pool_security(w.kube, p, w.trust)
    spec = w.kube.objects[("Certificate", "ns", "pool-hub-tls")]["spec"]
    assert "hubs.example.com" in spec["dnsNames"]
    assert spec["ipAddresses"] == ["127.0.0.1"]


def _secret(w: World) -> dict[str, bytes]:
    body = w.kube.objects[("Secret", "ns", "pool-hub-tls")]
    return {k: base64.b64decode(v) for k, v in body["data"].items()}


def _hub_cert(w: World) -> x509.Certificate:
    return x509.load_pem_x509_certificate(_secret(w)["tls.crt"])
