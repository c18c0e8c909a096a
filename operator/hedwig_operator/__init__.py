"""The Hedwig Kubernetes operator: HubPool and Topic resources, reconciled with kopf.

Layout (each module opens with why it is built the way it is):

- ``resources``: the API group, kinds, label, annotation and finalizer names; one place.
- ``specs``: a resource's spec parsed into frozen dataclasses, with the CRD's defaults.
- ``builders``: pure ``build_*`` functions, spec in, manifest dict out, one module per kind,
  so the Helm chart can mirror them and unit tests can check them without a cluster.
- ``kube``: the narrow Kubernetes API the operator uses (server-side apply, get, status
  patches, events) behind a Protocol, and its aiohttp implementation.
- ``metadata``: connections to each pool's ZooKeeper region (hedwig.metadata, never the hub).
- ``topics``, ``pools``, ``rebalancing``: the reconcilers, plain async functions of their
  inputs, so tests call them with fakes (``topics``: claims, reconcile, snapshot, status,
  deletion).
- ``workers``: one asyncio task per HubPool that refreshes status and runs rebalancing.
- ``handlers``: the kopf registrations, thin; ``__main__`` runs them.
"""

__version__ = "0.1.0"
