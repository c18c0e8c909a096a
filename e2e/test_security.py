"""Security end to end, against the real API server of e2e/controlplane.

The API server issues ServiceAccount tokens (``--service-account-issuer``) and publishes its
discovery document and JWKS, made public here the way a cluster does it (the ClusterRole
``system:service-account-issuer-discovery`` bound to unauthenticated callers). The operator
runs under its ServiceAccount with the shipped RBAC; for a HubPool with
``spec.security.enabled`` it makes the pool's CAs, hub certificate and ZooKeeper digest. The
hubs that serve are local processes started with exactly those Secrets, trusting the API
server's issuer. Then:

- a token from the TokenRequest API for a ServiceAccount whose HedwigUser allows
  ``orders.*`` publishes there and is refused elsewhere, and a token for another audience is
  refused outright;
- deleting the HedwigUser revokes its access within seconds;
- a ``tls`` HedwigUser gets a certificate from the operator, and it works;
- the CRD's CEL rules refuse a malformed HedwigUser with their message;
- a HedwigNamespace of the secured pool has its policy written into the digest-protected
  region, and holds a ServiceAccount's topics to its quota.
"""

from __future__ import annotations

import asyncio
import base64
import importlib.util
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from controlplane import cluster
from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import HubProcess
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port
from hedwig.errors import AuthenticationError, ForbiddenError, QuotaExceededError
from hedwig.security import ClientSecurity
from hedwig.security.ca import CertificateAuthority
from hedwig_e2e import (
    OperatorProcess,
    cert_manager_crds,
    control_plane_bins,
    install_operator_access,
    wait_for,
)

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(300)

NS = "hedwig-sec"
POOL = "secure"
GROUP_VERSION = "hedwig.io/v1alpha1"
OPERATOR = f"system:serviceaccount:{NS}:hedwig-operator"

# Anyone may read the issuer's discovery document and keys (what hubs verify tokens with).
PUBLIC_DISCOVERY = {
    "apiVersion": "rbac.authorization.k8s.io/v1",
    "kind": "ClusterRoleBinding",
    "metadata": {"name": "hedwig-e2e-public-issuer-discovery"},
    "roleRef": {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "system:service-account-issuer-discovery",
    },
    "subjects": [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}
        for name in ("system:unauthenticated", "system:authenticated")
    ],
}


@dataclass
class SecureBed:
    cp: cluster.ControlPlane
    zk: str
    workdir: Path
    operator: OperatorProcess
    hubs: list[HubProcess] = field(default_factory=list)

    def kubectl(self, *args: str, check: bool = True) -> Any:
        return self.cp.kubectl(*args, "-n", NS, check=check)

    def apply(self, manifest: dict[str, Any], check: bool = True) -> Any:
        return self.cp.apply(manifest, namespace=NS, check=check)

    def secret(self, name: str) -> dict[str, bytes] | None:
        proc = self.kubectl("get", "secret", name, "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        data = json.loads(proc.stdout).get("data") or {}
        return {k: base64.b64decode(v) for k, v in data.items()}

    def write_secret(self, name: str) -> Path:
        got = wait_for(f"Secret {name}", lambda: self.secret(name), 60)
        d = self.workdir / name
        d.mkdir(exist_ok=True)
        for key, value in got.items():
            (d / key).write_bytes(value)
        return d

    def token(self, service_account: str, audience: str = "hedwig") -> str:
        out = self.kubectl(
            "create", "token", service_account, f"--audience={audience}", "--duration=1h"
        )
        return str(out.stdout.strip())

    def ready(self, kind: str, name: str) -> dict[str, Any]:
        proc = self.kubectl("get", kind, name, "-o", "json", check=False)
        if proc.returncode != 0:
            return {}
        for c in (json.loads(proc.stdout).get("status") or {}).get("conditions") or []:
            if c["type"] == "Ready":
                return dict(c)
        return {}

    @property
    def addresses(self) -> list[str]:
        return [h.address for h in self.hubs]


def user_manifest(name: str, authentication: dict[str, Any], acls: list[Any]) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "HedwigUser",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "pool": POOL,
            "authentication": authentication,
            "authorization": {"acls": acls},
        },
    }


ORDERS_ACL = [
    {
        "resource": {"name": "orders.", "patternType": "prefix"},
        "operations": ["create", "publish", "subscribe", "describe"],
    }
]


ZK_ADMIN = "hedwig-admin:e2e-adm1n"


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureBed]:
    bins = control_plane_bins()
    workdir = tmp_path_factory.mktemp("e2e-security")
    # Two secured pools share the ensemble: /hedwig is closed to creation by their digests, and
    # the operator makes their regions with the admin digest, as the chart's ZooKeeper has it.
    admin_digest = workdir / "zookeeper-admin"
    admin_digest.write_text(ZK_ADMIN)
    with (
        cluster.ControlPlane(bins=bins) as cp,
        ZooKeeperServer(super_digest=ZK_ADMIN) as zk,
    ):
        cp.create_namespace(NS)
        kubeconfig = install_operator_access(cp, NS)
        cp.apply(PUBLIC_DISCOVERY)
        token = workdir / "operator-token"
        token.write_text(
            cp.kubectl(
                "create", "token", "hedwig-operator", "-n", NS, "--audience=hedwig"
            ).stdout.strip()
        )
        operator = OperatorProcess(
            NS,
            cp.env(kubeconfig),
            workdir / "operator.log",
            free_port(),
            {
                "HEDWIG_OPERATOR_STATUS_INTERVAL_S": "1",
                "HEDWIG_OPERATOR_RETRY_DELAY_S": "1",
                "HEDWIG_OPERATOR_PRINCIPAL": OPERATOR,
                "HEDWIG_TOKEN_FILE": str(token),
                "HEDWIG_ZK_ADMIN_DIGEST_FILE": str(admin_digest),
            },
        )
        bed = SecureBed(cp, zk.address, workdir, operator)
        operator.start()
        try:
            _secure_pool(bed)
            yield bed
        finally:
            operator.stop()
            for hub in bed.hubs:
                hub.kill()
            print(f"operator log {operator.log_path}:\n{operator.tail(80)}")


def cluster_issuers(bed: SecureBed) -> list[dict[str, str]]:
    """The hubs' token issuers: the cluster's ServiceAccount issuer, for audience hedwig."""
    return [
        {
            "issuer": cluster.SERVICE_ACCOUNT_ISSUER,
            "audience": "hedwig",
            # The API server's own discovery document names its JWKS.
            "discovery_url": f"{bed.cp.server}/.well-known/openid-configuration",
            "ca_file": str(bed.cp.ca_file),
            # As the operator trusts the cluster's issuer: its ServiceAccounts are principals
            # by their own names (hedwig.security.tokens).
            "principal_prefix": "",
        }
    ]


def _secure_pool(bed: SecureBed) -> None:
    """The pool (the operator makes its Secrets) and two hubs that run with them."""
    bed.apply(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "HubPool",
            "metadata": {"name": POOL, "namespace": NS},
            "spec": {
                "replicas": 0,
                "image": "hedwig/hub:e2e",
                "metadata": {"url": bed.zk},
                "security": {"enabled": True},
            },
        }
    )
    tls = bed.write_secret(f"{POOL}-hub-tls")
    digest = bed.write_secret(f"{POOL}-zookeeper") / "digest"
    issuers = cluster_issuers(bed)
    env = {
        "HEDWIG_TLS_CERT": str(tls / "tls.crt"),
        "HEDWIG_TLS_KEY": str(tls / "tls.key"),
        "HEDWIG_TLS_CLIENT_CA": str(tls / "client-ca.crt"),
        "HEDWIG_INTERNAL_CA": str(tls / "ca.crt"),
        "HEDWIG_INTERNAL_CERT": str(tls / "tls.crt"),
        "HEDWIG_INTERNAL_KEY": str(tls / "tls.key"),
        "HEDWIG_AUTHENTICATE": "true",
        "HEDWIG_AUTHORIZE": "true",
        "HEDWIG_SUPER_USERS": OPERATOR,
        "HEDWIG_TOKEN_ISSUERS": json.dumps(issuers),
        "HEDWIG_ZK_DIGEST_FILE": str(digest),
    }
    for i in range(2):
        hub = HubProcess(
            bed.zk,
            POOL,
            str(bed.workdir / f"hub-{i}"),
            session_timeout_s=4.0,
            env=env,
            internal_port=free_port(),
            extra_args=["--replication", "2/2/2"],
        )
        bed.hubs.append(hub)
        hub.start()


def client_security(bed: SecureBed, **kw: str) -> ClientSecurity:
    ca = bed.workdir / f"{POOL}-hub-tls" / "ca.crt"
    return ClientSecurity.build(tls_ca=str(ca), **kw)


async def publish(bed: SecureBed, security: ClientSecurity, topic: str) -> None:
    retry = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.2, deadline_s=10)
    async with HedwigClient(bed.addresses, security=security, retry=retry) as client:
        await client.publish(topic, b"hello")


def test_a_service_account_publishes_where_its_hedwiguser_allows(bed: SecureBed) -> None:
    bed.kubectl("create", "serviceaccount", "orders")
    bed.apply(
        user_manifest(
            "orders-app", {"type": "serviceAccount", "serviceAccount": "orders"}, ORDERS_ACL
        )
    )
    wait_for(
        "HedwigUser Ready", lambda: bed.ready("hedwigusers", "orders-app").get("status") == "True"
    )
    token = bed.token("orders")
    allowed = client_security(bed, token=token)
    asyncio.run(publish(bed, allowed, "orders.eu"))
    with pytest.raises(ForbiddenError, match="may not"):
        asyncio.run(publish(bed, allowed, "payments"))
    wrong_audience = client_security(bed, token=bed.token("orders", audience="someone-else"))
    with pytest.raises(AuthenticationError, match="audience"):
        asyncio.run(publish(bed, wrong_audience, "orders.eu"))

    # Deleting the HedwigUser revokes its access within seconds.
    started = time.monotonic()
    bed.kubectl("delete", "hedwiguser", "orders-app", "--wait=false")

    def refused() -> bool:
        try:
            asyncio.run(publish(bed, allowed, "orders.eu"))
        except ForbiddenError:
            return True
        return False

    wait_for("the revocation", refused, timeout=20, interval=0.2)
    assert time.monotonic() - started < 10


def test_a_tls_hedwiguser_gets_a_certificate_that_works(bed: SecureBed) -> None:
    bed.apply(user_manifest("bob", {"type": "tls"}, ORDERS_ACL))
    wait_for("HedwigUser Ready", lambda: bed.ready("hedwigusers", "bob").get("status") == "True")
    d = bed.write_secret("bob-user-tls")
    bob = ClientSecurity.build(
        tls_ca=str(d / "ca.crt"), cert=str(d / "tls.crt"), key=str(d / "tls.key")
    )
    asyncio.run(publish(bed, bob, "orders.us"))
    with pytest.raises(ForbiddenError, match="user:hedwig-sec:bob may not publish"):
        asyncio.run(publish(bed, bob, "payments"))


def test_the_crd_refuses_a_malformed_hedwiguser(bed: SecureBed) -> None:
    proc = bed.apply(user_manifest("broken", {"type": "serviceAccount"}, ORDERS_ACL), check=False)
    assert proc.returncode != 0
    assert "must name the ServiceAccount" in proc.stderr
    cluster_publish = [{"resource": {"type": "cluster"}, "operations": ["publish"]}]
    proc = bed.apply(user_manifest("broken", {"type": "tls"}, cluster_publish), check=False)
    assert proc.returncode != 0
    assert "the cluster has one operation: admin" in proc.stderr
    # A tls user's Secret is <name>-user-tls: the name leaves room for the suffix.
    proc = bed.apply(user_manifest("b" * 245, {"type": "tls"}, ORDERS_ACL), check=False)
    assert proc.returncode != 0
    assert "a tls user's name may have at most 244 characters" in proc.stderr


def test_the_operator_reaches_the_secured_hubs_as_itself(bed: SecureBed) -> None:
    """A Topic of the secured pool gets an owner: the operator's activation request goes to
    the hubs with TLS (the pool's CA) and its own token, as a super-user."""
    bed.apply(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "Topic",
            "metadata": {"name": "audit", "namespace": NS},
            "spec": {"pool": POOL},
        }
    )

    def owner() -> str | None:
        proc = bed.kubectl("get", "topic", "audit", "-o", "json", check=False)
        if proc.returncode != 0:
            return None
        status = json.loads(proc.stdout).get("status") or {}
        return status.get("owner")

    assert wait_for("Topic audit owned", owner, 60) in bed.addresses


def test_cert_manager_issues_the_hubs_certificate(bed: SecureBed) -> None:
    """``spec.security.certManager``: with cert-manager's own CRDs installed, the operator
    keeps a Certificate for the hubs that the API server validates against cert-manager's
    schema, makes no hub CA of its own, and once the Secret is issued publishes its CA for
    clients. cert-manager's controller cannot be built here (see ``cert_manager_crds``), so the
    test issues the Secret as its CA issuer does (tls.crt, tls.key and the CA as ca.crt); a hub
    then serves with it, the clients' CA the operator keeps beside it, and a client that
    trusts the published CA publishes."""
    pool = "managed"
    bed.cp.apply(cert_manager_crds())
    bed.cp.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/certificates.cert-manager.io",
        "crd/issuers.cert-manager.io",
    )
    ca = CertificateAuthority.create("e2e cert-manager CA", days=30)
    bed.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": "hedwig-ca", "namespace": NS},
            "data": {
                "tls.crt": base64.b64encode(ca.cert_pem).decode(),
                "tls.key": base64.b64encode(ca.key_pem).decode(),
            },
        }
    )
    bed.apply(
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": {"name": "hedwig-ca", "namespace": NS},
            "spec": {"ca": {"secretName": "hedwig-ca"}},
        }
    )
    bed.apply(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "HubPool",
            "metadata": {"name": pool, "namespace": NS},
            "spec": {
                "replicas": 0,
                "image": "hedwig/hub:e2e",
                "metadata": {"url": bed.zk},
                "security": {"enabled": True, "certManager": {"issuerRef": {"name": "hedwig-ca"}}},
            },
        }
    )

    def certificate() -> dict[str, Any] | None:
        proc = bed.kubectl("get", "certificate", f"{pool}-hub-tls", "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    cert = wait_for("the hubs' Certificate", certificate, 60)
    spec = cert["spec"]
    assert spec["issuerRef"] == {"name": "hedwig-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert spec["secretName"] == f"{pool}-hub-tls"
    assert {"server auth", "client auth"} <= set(spec["usages"])
    assert bed.secret(f"{pool}-ca") is None  # no hub CA of the operator's own

    # Issued as cert-manager's CA issuer does it.
    issued = ca.issue(
        spec["commonName"],
        dns_names=spec["dnsNames"],
        ip_addresses=spec["ipAddresses"],
        server=True,
        client=True,
        days=30,
    )
    bed.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": {"name": f"{pool}-hub-tls", "namespace": NS},
            "data": {
                k: base64.b64encode(v).decode()
                for k, v in (
                    ("tls.crt", issued.cert_pem),
                    ("tls.key", issued.key_pem),
                    ("ca.crt", ca.cert_pem),
                )
            },
        }
    )

    def published() -> str | None:
        proc = bed.kubectl("get", "configmap", f"{pool}-ca-cert", "-o", "json", check=False)
        return json.loads(proc.stdout)["data"]["ca.crt"] if proc.returncode == 0 else None

    assert wait_for("the published CA", published, 60).encode() == ca.cert_pem
    tls = bed.write_secret(f"{pool}-hub-tls")
    clients_ca = bed.write_secret(f"{pool}-clients-ca") / "tls.crt"
    digest = bed.write_secret(f"{pool}-zookeeper") / "digest"
    issuers = cluster_issuers(bed)
    hub = HubProcess(
        bed.zk,
        pool,
        str(bed.workdir / f"{pool}-hub"),
        session_timeout_s=4.0,
        env={
            "HEDWIG_TLS_CERT": str(tls / "tls.crt"),
            "HEDWIG_TLS_KEY": str(tls / "tls.key"),
            "HEDWIG_TLS_CLIENT_CA": str(clients_ca),
            "HEDWIG_INTERNAL_CA": str(tls / "ca.crt"),
            "HEDWIG_INTERNAL_CERT": str(tls / "tls.crt"),
            "HEDWIG_INTERNAL_KEY": str(tls / "tls.key"),
            "HEDWIG_AUTHENTICATE": "true",
            "HEDWIG_AUTHORIZE": "true",
            "HEDWIG_SUPER_USERS": OPERATOR,
            "HEDWIG_TOKEN_ISSUERS": json.dumps(issuers),
            "HEDWIG_ZK_DIGEST_FILE": str(digest),
        },
        internal_port=free_port(),
        extra_args=["--replication", "1/1/1"],
    )
    bed.hubs.append(hub)
    hub.start()
    ca_file = bed.workdir / f"{pool}-published-ca.crt"
    ca_file.write_bytes(ca.cert_pem)
    token = (bed.workdir / "operator-token").read_text().strip()

    async def publish_there() -> int:
        security = ClientSecurity.build(tls_ca=str(ca_file), token=token)
        retry = RetryPolicy(initial_delay_s=0.05, max_delay_s=0.2, deadline_s=10)
        async with HedwigClient([hub.address], security=security, retry=retry) as client:
            return (await client.publish("managed.hello", b"issued by cert-manager")).seq

    assert asyncio.run(publish_there()) == 1


def test_a_hedwig_namespace_holds_a_secured_pools_tenant_to_its_quota(bed: SecureBed) -> None:
    """The operator writes the namespace's policy into the secured pool's region (opened with
    its digest), and a ServiceAccount allowed team/b/ is refused its third topic by the secured
    hubs with QUOTA_EXCEEDED; the status counts 2 of 2; deleting the resource lifts it."""
    bed.kubectl("create", "serviceaccount", "team-b")
    acl = [
        {
            "resource": {"name": "team/b/", "patternType": "prefix"},
            "operations": ["create", "publish", "subscribe", "describe"],
        }
    ]
    bed.apply(user_manifest("team-b", {"type": "serviceAccount", "serviceAccount": "team-b"}, acl))
    bed.apply(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "HedwigNamespace",
            "metadata": {"name": "team-b", "namespace": NS},
            "spec": {"pool": POOL, "name": "team/b", "maxTopics": 2},
        }
    )
    for kind in ("hedwigusers", "hedwignamespaces"):
        wait_for(
            f"{kind} team-b Ready", lambda k=kind: bed.ready(k, "team-b").get("status") == "True"
        )
    team = client_security(bed, token=bed.token("team-b"))
    asyncio.run(publish(bed, team, "team/b/one"))
    asyncio.run(publish(bed, team, "team/b/two"))
    with pytest.raises(QuotaExceededError, match="max_topics of namespace 'team/b'"):
        asyncio.run(publish(bed, team, "team/b/three"))

    def usage() -> dict[str, Any] | None:
        proc = bed.kubectl("get", "hedwignamespace", "team-b", "-o", "json")
        status = json.loads(proc.stdout).get("status") or {}
        return status if status.get("usage") == {"topics": 2} else None

    status = wait_for("usage 2 of 2", usage, 30)
    assert status["limits"]["topics"] == 2
    bed.kubectl("delete", "hedwignamespace", "team-b", "--wait=true", "--timeout=60s")
    asyncio.run(publish(bed, team, "team/b/three"))  # no policy: no quota
