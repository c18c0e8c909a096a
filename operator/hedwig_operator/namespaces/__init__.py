"""HedwigNamespace resources: each declares one namespace (``tenant/namespace``) of a pool's
region, written as the namespace's policy record (the defaults of its topics, auto-creation,
its quotas), with its usage against its limits in its status, and the record deleted with it.

Where things are: ``claims`` (which resource manages which namespace of a pool), ``reconcile``
(the rules a HedwigNamespace is reconciled and deleted by), ``status`` (its status).
"""

from hedwig_operator.namespaces.claims import NamespaceClaim, claim_of, conflict_winner
from hedwig_operator.namespaces.reconcile import (
    delete_namespace_policy,
    reconcile_namespace,
    wants_finalizer,
)
from hedwig_operator.namespaces.status import build_namespace_status, status_changed

__all__ = [
    "NamespaceClaim",
    "build_namespace_status",
    "claim_of",
    "conflict_winner",
    "delete_namespace_policy",
    "reconcile_namespace",
    "status_changed",
    "wants_finalizer",
]
