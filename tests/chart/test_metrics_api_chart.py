"""The chart's external metrics API (metricsApi.*), statically: off by default; when on, its
Deployment runs ``python -m hedwig_operator.metricsapi`` from the operator's image behind a
Service and the APIService ``v1beta1.external.metrics.k8s.io``, whose caBundle signed the
serving certificate for the name the aggregator checks; the aggregated API's RBAC; its
identity on a secured pool. (Beside tests/chart/test_chart.py, which is long enough.) The path
through a real API server is e2e/test_metrics_api.py."""

from __future__ import annotations

import base64
import datetime
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.chart.test_chart import RECOMMENDED_LABELS
from tests.chart.tools import find, one, render, render_error

ON = ["metricsApi.enabled=true"]
NAME = "hedwig-metrics-api"
SA = f"system:serviceaccount:hedwig:{NAME}"


def _ours(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        o
        for o in objects
        if o["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "metrics-api"
    ]


def _verify_signed_by(cert: x509.Certificate, ca: x509.Certificate) -> None:
    key = ca.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(
            cert.signature,
            cert.tbs_certificate_bytes,
            padding.PKCS1v15(),
            cert.signature_hash_algorithm,
        )
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(
            cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(cert.signature_hash_algorithm)
        )


def test_off_by_default() -> None:
    objects = render()
    assert not _ours(objects)
    assert not find(objects, "APIService")


def test_deployment_runs_the_metrics_api_from_the_operator_image() -> None:
    objects = render(sets=ON)
    deployment = one(objects, "Deployment", NAME)
    operator = one(objects, "Deployment", "hedwig-operator")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["python", "-m", "hedwig_operator.metricsapi"]
    args = container["args"]
    assert "--hubs=hedwig.hedwig.svc:4080" in args
    assert "--tls-cert=/var/run/secrets/hedwig-metrics-api/tls.crt" in args
    # Security is on by default: TLS to the hubs with the pool's CA, a token of its audience.
    assert "--hub-ca-file=/var/run/secrets/hedwig-pool-ca/ca.crt" in args
    assert "--hub-token-file=/var/run/secrets/hedwig/token" in args
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["serving"]["secret"]["secretName"] == f"{NAME}-tls"
    assert volumes["pool-ca"]["configMap"]["name"] == "hedwig-ca-cert"
    (source,) = volumes["hedwig-token"]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "hedwig"
    assert pod["serviceAccountName"] == NAME
    assert container["readinessProbe"]["httpGet"]["scheme"] == "HTTPS"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {m["mountPath"] for m in container["volumeMounts"]} >= {"/tmp"}
    service = one(objects, "Service", NAME)
    (port,) = service["spec"]["ports"]
    assert (port["port"], port["targetPort"]) == (443, "https")
    assert (
        service["spec"]["selector"].items()
        <= deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    for obj in _ours(objects):
        labels = obj["metadata"]["labels"]
        assert all(k in labels for k in RECOMMENDED_LABELS), obj["metadata"]["name"]


def test_the_apiservice_trusts_the_serving_certificate_for_the_services_name() -> None:
    objects = render(sets=ON, namespace="messaging")
    api = one(objects, "APIService", "v1beta1.external.metrics.k8s.io")
    spec = api["spec"]
    assert (spec["group"], spec["version"]) == ("external.metrics.k8s.io", "v1beta1")
    assert spec["service"] == {"name": NAME, "namespace": "messaging", "port": 443}
    assert "insecureSkipTLSVerify" not in spec
    ca = x509.load_pem_x509_certificate(base64.b64decode(spec["caBundle"]))
    secret = one(objects, "Secret", f"{NAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert base64.b64decode(secret["data"]["ca.crt"]) == base64.b64decode(spec["caBundle"])
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    _verify_signed_by(cert, ca)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    # The aggregator dials <service>.<namespace>.svc and checks that name.
    assert f"{NAME}.messaging.svc" in names.get_values_for_type(x509.DNSName)
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages
    assert cert.not_valid_after_utc > datetime.datetime.now(datetime.UTC) + datetime.timedelta(
        days=365
    )


def test_rbac_of_an_aggregated_api_and_for_the_autoscaler() -> None:
    objects = render(sets=ON)
    bindings = {b["roleRef"]["name"]: b for b in find(objects, "ClusterRoleBinding")}
    delegator = bindings["system:auth-delegator"]
    assert delegator["subjects"] == [
        {"kind": "ServiceAccount", "name": NAME, "namespace": "hedwig"}
    ]
    reader = one(objects, "RoleBinding", "hedwig-hedwig-metrics-api-auth-reader")
    assert reader["metadata"]["namespace"] == "kube-system"
    assert reader["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "extension-apiserver-authentication-reader",
    }
    role = one(objects, "ClusterRole", "hedwig-hedwig-metrics-api-reader")
    assert role["rules"] == [
        {
            "apiGroups": ["external.metrics.k8s.io"],
            "resources": ["*"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    hpa = bindings[role["metadata"]["name"]]
    assert hpa["subjects"] == [
        {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    ]


def test_its_identity_on_a_secured_pool_may_describe_by_default() -> None:
    user = one(render(sets=ON), "HedwigUser", NAME)
    assert user["spec"]["pool"] == "hedwig"
    assert user["spec"]["authentication"] == {"type": "serviceAccount", "serviceAccount": NAME}
    assert user["spec"]["authorization"]["acls"] == [
        {
            "resource": {"type": "topic", "name": "", "patternType": "prefix"},
            "operations": ["describe"],
        }
    ]
    # A hub lists other principals' subscriptions to admin only: opted into, never the default.
    broader = render(sets=[*ON, "metricsApi.hubOperations={describe,admin}"])
    (rule,) = one(broader, "HedwigUser", NAME)["spec"]["authorization"]["acls"]
    assert rule["operations"] == ["describe", "admin"]
    error = render_error(sets=[*ON, "metricsApi.hubOperations={publish}"])
    assert "hubOperations" in error
    plain = render(sets=[*ON, "hubPool.security.enabled=false"])
    assert not find(plain, "HedwigUser")
    (container,) = one(plain, "Deployment", NAME)["spec"]["template"]["spec"]["containers"]
    assert not [a for a in container["args"] if a.startswith("--hub-")]


def test_network_policies_admit_the_metrics_api() -> None:
    objects = render(sets=[*ON, "networkPolicy.clients[0].podSelector.matchLabels.app=x"])
    own = one(objects, "NetworkPolicy", NAME)
    assert own["spec"]["ingress"] == [{"ports": [{"port": 6443, "protocol": "TCP"}]}]
    hubs = one(objects, "NetworkPolicy", "hedwig-hubs")
    peers = hubs["spec"]["ingress"][0]["from"]
    assert any(
        p.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/component")
        == "metrics-api"
        for p in peers
    )


def test_hubs_are_needed_without_the_charts_pool() -> None:
    assert "metricsApi.hubs is required" in render_error(sets=[*ON, "hubPool.enabled=false"])
    objects = render(sets=[*ON, "hubPool.enabled=false", "metricsApi.hubs=h1:4080\\,h2:4080"])
    (container,) = one(objects, "Deployment", NAME)["spec"]["template"]["spec"]["containers"]
    assert "--hubs=h1:4080,h2:4080" in container["args"]
