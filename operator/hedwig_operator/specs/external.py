"""``spec.external``: the pool's hubs reachable from outside the cluster, each at its own address.

Clients outside the cluster cannot resolve the hubs' pod names, nor route to pod addresses,
and a topic is served by one hub: a client must reach every hub by itself, so each hub gets a
Service of its own (``<pool>-<ordinal>-external``, selecting its pod by the StatefulSet's
``statefulset.kubernetes.io/pod-name`` label), as Strimzi gives each Kafka broker. The hubs
listen for those clients on a second client port (``HEDWIG_EXTERNAL_LISTEN``) and name every
hub to them by its external address (``HEDWIG_EXTERNAL_ADVERTISE``, by hub id).

- ``NodePort``: hub ``i`` is at ``nodePortBase + i`` on every node (or its own ``nodePort``
  under ``hubs``). Fixed ports, not ones Kubernetes picks: clients are configured with them,
  and a pool deleted and made again must come back where its clients look. The advertised
  host is ``advertisedHost`` (a node's address or a name resolving to the nodes), by default
  the address of the node the hub's pod runs on (the downward API's ``status.hostIP``).
- ``LoadBalancer``: each hub's Service gets a load balancer, at ``port``; its address is what
  the cloud gives the Service (``status.loadBalancer.ingress``), read by the operator, unless
  a hub's ``advertisedHost`` says otherwise. A hub whose address is not known yet is
  published with none (external clients are not sent to it) until it is.

``hubs`` overrides, per ordinal, the advertised host and port (a proxy in front) and the node
port. A secured pool's certificate must carry every advertised host, so a secured pool with
NodePort needs ``advertisedHost`` (the node a pod lands on is not known when the certificate
is issued); load balancers' addresses are added once known, and the certificate issued again.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass, field

from hedwig_operator.specs.common import Raw, SpecError, int_or, opt_int, opt_str, section

EXTERNAL_TYPES = ("NodePort", "LoadBalancer")
DEFAULT_EXTERNAL_PORT = 4082
# What the hub's pod calls its node's address (the downward API's status.hostIP).
HOST_IP = "$(HOST_IP)"
NODE_PORTS = (30000, 32767)  # the API server's default --service-node-port-range


@dataclass(frozen=True, slots=True)
class ExternalHub:
    """One entry of ``spec.external.hubs``: overrides for the hub of that ordinal."""

    hub: int
    advertised_host: str | None = None
    advertised_port: int | None = None
    node_port: int | None = None


@dataclass(frozen=True, slots=True)
class ExternalSpec:
    type: str
    port: int = DEFAULT_EXTERNAL_PORT
    node_port_base: int | None = None
    advertised_host: str | None = None
    annotations: Mapping[str, str] = field(default_factory=dict)
    hubs: tuple[ExternalHub, ...] = ()
    # Observed, not parsed: each hub's load balancer's address, as the cloud gave its Service
    # (``status.loadBalancer.ingress``), by ordinal (``hedwig_operator.pools``).
    balancers: Mapping[int, str] = field(default_factory=dict)

    def _override(self, ordinal: int) -> ExternalHub:
        return next((h for h in self.hubs if h.hub == ordinal), ExternalHub(ordinal))

    def node_port(self, ordinal: int) -> int | None:
        """Hub ``ordinal``'s node port (NodePort), None otherwise."""
        if self.type != "NodePort":
            return None
        given = self._override(ordinal).node_port
        if given is not None:
            return given
        assert self.node_port_base is not None  # parse_external checked
        return self.node_port_base + ordinal

    def advertised(self, ordinal: int, balancer: str | None = None) -> str | None:
        """Where external clients reach hub ``ordinal`` (``balancer``: its load balancer's
        address, if the cloud gave one); None while not known."""
        over = self._override(ordinal)
        host: str | None
        if self.type == "NodePort":
            host = over.advertised_host or self.advertised_host or HOST_IP
            port = over.advertised_port or self.node_port(ordinal)
        else:
            host = over.advertised_host or balancer
            port = over.advertised_port or self.port
        return f"{host}:{port}" if host else None

    def hosts(self, hubs: int, balancers: Mapping[int, str]) -> list[str]:
        """Every host the first ``hubs`` hubs are advertised at (for the certificate)."""
        found: list[str] = []
        for ordinal in range(hubs):
            address = self.advertised(ordinal, balancers.get(ordinal))
            host = None if address is None else address.rpartition(":")[0]
            if host and host != HOST_IP and host not in found:
                found.append(host)
        return found


def split_hosts(hosts: list[str]) -> tuple[list[str], list[str]]:
    """``hosts`` as (DNS names, IP addresses), as a certificate lists them."""
    names: list[str] = []
    ips: list[str] = []
    for host in hosts:
        try:
            ips.append(str(ipaddress.ip_address(host)))
        except ValueError:
            names.append(host)
    return names, ips


def parse_external(spec: Raw, *, secured: bool) -> ExternalSpec | None:
    """``spec.external`` (None when absent); ``SpecError`` naming the field if invalid."""
    if spec.get("external") is None:
        return None
    path = "spec.external"
    raw = section(spec, "external", "spec")
    kind = opt_str(raw, "type", path)
    if kind not in EXTERNAL_TYPES:
        raise SpecError(f"{path}.type", f"must be NodePort or LoadBalancer, got {kind!r}")
    base = opt_int(raw, "nodePortBase", path, minimum=NODE_PORTS[0])
    hubs = tuple(_hub(h, f"{path}.hubs[{i}]") for i, h in enumerate(_list(raw, "hubs", path)))
    got = ExternalSpec(
        type=kind,
        port=int_or(raw, "port", path, DEFAULT_EXTERNAL_PORT, minimum=1),
        node_port_base=base,
        advertised_host=opt_str(raw, "advertisedHost", path),
        annotations={str(k): str(v) for k, v in section(raw, "annotations", path).items()},
        hubs=hubs,
    )
    if kind == "NodePort" and base is None:
        raise SpecError(
            f"{path}.nodePortBase",
            "NodePort needs the first hub's node port (hub i gets nodePortBase + i): clients "
            "are configured with the ports, so they are fixed, not picked by Kubernetes",
        )
    if kind == "NodePort" and secured and not got.advertised_host:
        raise SpecError(
            f"{path}.advertisedHost",
            "a secured pool's certificate names the host external clients dial: give a "
            "node's address or a DNS name of the nodes",
        )
    return got


def _list(raw: Raw, key: str, path: str) -> list[Raw]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of objects")
    return value


def _hub(raw: Raw, path: str) -> ExternalHub:
    hub = opt_int(raw, "hub", path, minimum=0)
    if hub is None:
        raise SpecError(f"{path}.hub", "is required (the hub's ordinal)")
    return ExternalHub(
        hub=hub,
        advertised_host=opt_str(raw, "advertisedHost", path),
        advertised_port=opt_int(raw, "advertisedPort", path, minimum=1),
        node_port=opt_int(raw, "nodePort", path, minimum=NODE_PORTS[0]),
    )
