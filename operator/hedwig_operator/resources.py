"""Names shared by the CRDs, the builders and the handlers.

They are part of the operator's contract with users (labels and annotations appear in their
manifests and selectors), so they live in one module and the CRD files in ``crds/`` are tested
against them.
"""

from __future__ import annotations

from typing import Final

GROUP: Final = "hedwig.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

POOL_KIND: Final = "HubPool"
POOL_PLURAL: Final = "hubpools"
TOPIC_KIND: Final = "Topic"
TOPIC_PLURAL: Final = "topics"
USER_KIND: Final = "HedwigUser"
USER_PLURAL: Final = "hedwigusers"
NAMESPACE_KIND: Final = "HedwigNamespace"
NAMESPACE_PLURAL: Final = "hedwignamespaces"

# Server-side apply field manager: every field the operator sets on a child is owned by it.
FIELD_MANAGER: Final = "hedwig-operator"

# Finalizer kopf puts on Topics whose data must be deleted with them (deletionPolicy Delete).
FINALIZER: Final = f"{GROUP}/topic-data"

# Annotations users set.
ANNOTATION_REBALANCE_PAUSED: Final = f"{GROUP}/rebalance-paused"  # "true" pauses rebalancing
ANNOTATION_FINALIZER: Final = f"{GROUP}/finalizer"  # "false": never hold a deletion
# Annotations the operator sets on the pod template.
ANNOTATION_CONFIG_HASH: Final = f"{GROUP}/config-hash"

# Kopf's bookkeeping annotations go under our own prefix, not kopf.zalando.org.
KOPF_PREFIX: Final = f"operator.{GROUP}"

# The hub's ports inside a pod. Fixed: the hub image, probes and Services all agree on them.
HUB_PORT: Final = 4080
INTERNAL_PORT: Final = 4081  # hub-to-hub (mutual TLS), with spec.security
EXTERNAL_PORT: Final = 4082  # clients outside the cluster, with spec.external
METRICS_PORT: Final = 9100
# Where a secured hub's certificates are mounted (the <pool>-hub-tls Secret).
TLS_DIR: Final = "/etc/hedwig/tls"
ZK_DIGEST_DIR: Final = "/etc/hedwig/zookeeper"
# A secured etcd's access Secret (spec.metadata.secretName), read through HEDWIG_ETCD_DIR.
ETCD_ACCESS_DIR: Final = "/etc/hedwig/etcd"
DATA_DIR: Final = "/var/lib/hedwig"
# The hub's drain socket (HEDWIG_DRAIN_SOCKET), in the pod's /tmp emptyDir, which no other
# container mounts: the preStop hook drains through it, with no token (a peer address on the
# metrics port proves nothing behind a service mesh's sidecar).
DRAIN_SOCKET: Final = "/tmp/hedwig-drain.sock"
# A tls HedwigUser's Secret is named <user> + this: a suffix no pool Secret's name has
# (builders/security.py), so a user's name never makes it one of its pool's Secrets.
USER_SECRET_SUFFIX: Final = "-user-tls"
# Kubernetes' limit on an object's name (a DNS subdomain).
MAX_NAME: Final = 253

LABEL_NAME: Final = "app.kubernetes.io/name"
LABEL_INSTANCE: Final = "app.kubernetes.io/instance"
LABEL_COMPONENT: Final = "app.kubernetes.io/component"
LABEL_PART_OF: Final = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY: Final = "app.kubernetes.io/managed-by"
LABEL_VERSION: Final = "app.kubernetes.io/version"
LABEL_POOL: Final = f"{GROUP}/pool"
# Set by a Secret's owner on the access Secret a pool names (spec.metadata.secretName), with
# the pool's name: the owner's consent that the operator and the pool's hubs use it.
LABEL_STORE_ACCESS: Final = f"{GROUP}/store-access-for"

HUB_APP_NAME: Final = "hedwig-hub"
