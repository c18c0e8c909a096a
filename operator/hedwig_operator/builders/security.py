"""A secured pool's pieces, as pure functions: Secret names and manifests, the hubs'
security settings, and what the StatefulSet mounts.

- ``<pool>-ca``: the pool's hub CA (``tls.crt``, ``tls.key``), which signs the hubs'
  certificate; clients trust it (``ca.crt`` of every issued Secret).
- ``<pool>-clients-ca``: the CA of ``tls`` HedwigUsers' client certificates.
- ``<pool>-hub-tls``: the hubs' certificate (one for the pool: its names cover every pod of
  the headless Service and the client Service), with ``ca.crt`` and ``client-ca.crt``.
  Mounted at ``TLS_DIR``; the hubs reload it when the operator renews it.
- ``<pool>-ca-cert`` (a ConfigMap): the hub CA's certificate alone, for clients.
- ``<pool>-zookeeper``: the ZooKeeper digest (``digest``: ``hedwig:<random>``) that the hubs
  and the operator create znodes with.
- ``<user>-user-tls``: a ``tls`` HedwigUser's certificate (``tls.crt``, ``tls.key``, and
  ``ca.crt`` to trust the hubs), owned by the user. No pool Secret's name ends in
  ``-user-tls``, so no user's name can make it one of its pool's (a user named ``<pool>-ca``
  once had its certificate written over the pool's hub CA).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

from hedwig_operator.builders.labels import (
    child_metadata,
    client_service_name,
    headless_service_name,
)
from hedwig_operator.resources import INTERNAL_PORT, TLS_DIR, USER_SECRET_SUFFIX, ZK_DIGEST_DIR
from hedwig_operator.specs import PoolSpec
from hedwig_operator.specs.external import split_hosts

TLS_VOLUME = "hub-tls"
# What cert-manager writes into a Certificate's Secret (ca.crt: the issuing CA).
CERT_MANAGER_KEYS = ("tls.crt", "tls.key", "ca.crt")
ZK_VOLUME = "zookeeper-digest"


def ca_secret_name(pool: PoolSpec) -> str:
    return f"{pool.name}-ca"


def clients_ca_secret_name(pool: PoolSpec) -> str:
    return f"{pool.name}-clients-ca"


def hub_tls_secret_name(pool: PoolSpec) -> str:
    return f"{pool.name}-hub-tls"


def zk_secret_name(pool: PoolSpec) -> str:
    return f"{pool.name}-zookeeper"


def user_secret_name(user: str) -> str:
    return f"{user}{USER_SECRET_SUFFIX}"


def pool_secret_names(pool: PoolSpec) -> list[str]:
    """Every Secret the operator keeps for a pool (with its own CA; cert-manager writes the
    hubs' certificate otherwise)."""
    return [
        ca_secret_name(pool),
        clients_ca_secret_name(pool),
        hub_tls_secret_name(pool),
        zk_secret_name(pool),
    ]


def ca_cert_configmap_name(pool: PoolSpec) -> str:
    return f"{pool.name}-ca-cert"


def ca_cert_configmap(pool: PoolSpec, ca_pem: bytes) -> dict[str, Any]:
    """The hub CA's certificate alone, for clients to trust (mount it, or read it as
    ``HEDWIG_TLS_CA``): public, unlike the Secret that also holds the CA's key."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": child_metadata(pool, ca_cert_configmap_name(pool)),
        "data": {"ca.crt": ca_pem.decode()},
    }


def hub_dns_names(pool: PoolSpec) -> list[str]:
    """Every name a client or another hub may dial a hub of the pool by (external clients
    too: ``spec.external``'s hosts that are names)."""
    headless, client = headless_service_name(pool), client_service_name(pool)
    ns = pool.namespace
    return [
        *_in_cluster_names(headless, client, ns),
        *split_hosts(_external_hosts(pool))[0],
    ]


def hub_ip_addresses(pool: PoolSpec) -> list[str]:
    """Every IP address a client may dial a hub of the pool at: loopback, and
    ``spec.external``'s hosts that are addresses (a node's, a load balancer's)."""
    return ["127.0.0.1", *split_hosts(_external_hosts(pool))[1]]


def _external_hosts(pool: PoolSpec) -> list[str]:
    external = pool.external
    return [] if external is None else external.hosts(pool.replicas, external.balancers)


def _in_cluster_names(headless: str, client: str, ns: str) -> list[str]:
    return [
        f"*.{headless}.{ns}.svc",
        f"*.{headless}.{ns}.svc.cluster.local",
        client,
        f"{client}.{ns}",
        f"{client}.{ns}.svc",
        f"{client}.{ns}.svc.cluster.local",
        "localhost",
    ]


def secret_manifest(pool: PoolSpec, name: str, data: Mapping[str, bytes]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": child_metadata(pool, name),
        "type": "Opaque",
        "data": {k: base64.b64encode(v).decode() for k, v in sorted(data.items())},
    }


def secret_data(secret: Mapping[str, Any] | None) -> dict[str, bytes]:
    """A Secret's data, decoded (empty if there is no Secret)."""
    if not secret:
        return {}
    return {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}


def token_issuers(pool: PoolSpec) -> str:
    """The hubs' ``token_issuers``: the cluster's ServiceAccount issuer, whose principals are
    the ServiceAccounts' names as Kubernetes gives them (``system:serviceaccount:...``, a
    namespace no certificate may name), so with no prefix (``hedwig.security.tokens``)."""
    issuer: dict[str, Any] = {
        "issuer": pool.security.service_account_issuer,
        "audience": pool.security.audience,
        "ca_file": "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "bearer_token_file": "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "principal_prefix": "",
    }
    if pool.security.jwks_url:
        issuer["jwks_url"] = pool.security.jwks_url
    else:
        issuer["discovery_url"] = f"{pool.security.api_server}/.well-known/openid-configuration"
    return json.dumps([issuer], sort_keys=True)


def security_settings(pool: PoolSpec, operator_principal: str) -> dict[str, object]:
    """The hubs' security settings (``hedwig.settings.SecuritySettings``, by name); for a pool
    not secured, ``insecure`` alone: its hubs listen on the pod's address, open to whoever
    reaches it, which a hub does only when told so (``hedwig.settings.exposure``)."""
    if not pool.security.enabled:
        return {"insecure": True}
    supers = (
        [operator_principal, *pool.security.super_users]
        if operator_principal
        else list(pool.security.super_users)
    )
    return {
        "tls_cert": f"{TLS_DIR}/tls.crt",
        "tls_key": f"{TLS_DIR}/tls.key",
        "tls_client_ca": f"{TLS_DIR}/client-ca.crt",
        "internal_listen": f"0.0.0.0:{INTERNAL_PORT}",
        "internal_ca": f"{TLS_DIR}/ca.crt",
        "internal_cert": f"{TLS_DIR}/tls.crt",
        "internal_key": f"{TLS_DIR}/tls.key",
        # Every hub of the pool presents the one <pool>-hub-tls: a peer of the internal
        # listener must hold its key, whoever else the hub CA signs for (a ClusterIssuer signs
        # for any namespace that may create a Certificate).
        "internal_peer_keys": "own",
        "authenticate": True,
        "authorize": True,
        "super_users": ",".join(supers),
        "token_issuers": token_issuers(pool),
    }


def store_environment(pool: PoolSpec) -> dict[str, str]:
    """How a secured pool's hubs reach its ZooKeeper: the digest file's variable, which the
    metadata store reads (``hedwig.metadata``), not a hub setting."""
    if not pool.security.enabled:
        return {}
    return {"HEDWIG_ZK_DIGEST_FILE": f"{ZK_DIGEST_DIR}/digest"}


def security_volumes(pool: PoolSpec) -> list[dict[str, Any]]:
    if not pool.security.enabled:
        return []
    tls: dict[str, Any] = {"secret": {"secretName": hub_tls_secret_name(pool)}}
    if pool.security.cert_manager is not None:
        # cert-manager owns the hubs' Secret (tls.crt, tls.key, ca.crt) and rewrites it on
        # renewal; the clients' CA, which the operator keeps, is projected beside it.
        tls = {
            "projected": {
                "sources": [
                    {
                        "secret": {
                            "name": hub_tls_secret_name(pool),
                            "items": [{"key": k, "path": k} for k in CERT_MANAGER_KEYS],
                        }
                    },
                    {
                        "secret": {
                            "name": clients_ca_secret_name(pool),
                            "items": [{"key": "tls.crt", "path": "client-ca.crt"}],
                        }
                    },
                ]
            }
        }
    return [
        {"name": TLS_VOLUME, **tls},
        {"name": ZK_VOLUME, "secret": {"secretName": zk_secret_name(pool)}},
    ]


def hub_certificate(pool: PoolSpec) -> dict[str, Any]:
    """The cert-manager Certificate of the hubs (``spec.security.certManager``): the names and
    usages the operator's own hub certificate has, written into ``<pool>-hub-tls``."""
    issuer = pool.security.cert_manager
    assert issuer is not None
    return {
        "apiVersion": "cert-manager.io/v1",
        "kind": "Certificate",
        "metadata": child_metadata(pool, hub_tls_secret_name(pool)),
        "spec": {
            "secretName": hub_tls_secret_name(pool),
            "commonName": f"hub.{pool.name}.{pool.namespace}",
            "dnsNames": hub_dns_names(pool),
            "ipAddresses": hub_ip_addresses(pool),
            "duration": f"{pool.security.certificate_days * 24}h",
            "renewBefore": f"{pool.security.renew_before_days * 24}h",
            # Hubs present it on both listeners and as clients of each other's internal one.
            "usages": ["digital signature", "key encipherment", "server auth", "client auth"],
            # The key stays through renewals: the hubs pin it (HEDWIG_INTERNAL_PEER_KEYS=own),
            # and with a new key at each renewal, hubs whose files the kubelet had updated
            # and hubs it had not yet would refuse each other for a minute or two.
            "privateKey": {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"},
            "issuerRef": {"name": issuer.name, "kind": issuer.kind, "group": issuer.group},
        },
    }


def security_mounts(pool: PoolSpec) -> list[dict[str, Any]]:
    if not pool.security.enabled:
        return []
    return [
        {"name": TLS_VOLUME, "mountPath": TLS_DIR, "readOnly": True},
        {"name": ZK_VOLUME, "mountPath": ZK_DIGEST_DIR, "readOnly": True},
    ]
