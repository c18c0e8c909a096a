"""The HubPool spec: a pool of hubs serving one ZooKeeper region, and how it is rebalanced.

Defaults repeat those of ``crds/hubpools.hedwig.io.yaml`` (a unit test keeps them equal). The
region defaults to the pool's name because most users run one pool per region and should not
have to say it twice; it cannot change later (the CRD refuses it), since every topic's metadata
lives under it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hedwig.metadata import ReplicationConfig
from hedwig.placement import POLICIES
from hedwig.placement.rebalance import RebalanceConfig
from hedwig.placement.scaling import ScalingConfig
from hedwig_operator.resources import ANNOTATION_REBALANCE_PAUSED
from hedwig_operator.specs.autoscaling import AutoscalingSpec, parse_autoscaling
from hedwig_operator.specs.common import (
    Raw,
    SpecError,
    bool_or,
    float_or,
    int_or,
    opt_int,
    opt_str,
    replication,
    req_str,
    section,
)
from hedwig_operator.specs.external import ExternalSpec, parse_external

RETENTION_POLICIES = ("Retain", "Delete")

# Defaults of PoolSpec's fields that parse_pool also needs (slotted dataclasses hide them).
DEFAULT_REPLICAS = 3
DEFAULT_PLACEMENT = "load-weighted"
DEFAULT_METADATA_SESSION_TIMEOUT_S = 6.0
DEFAULT_GRACE_PERIOD_S = 60
DEFAULT_PRE_STOP_SLEEP_S = 5
# Each hub's container when the pool names no resources: enough for a modest pool, and a
# memory limit so one hub cannot starve its node. Real loads set their own (docs/deploying.md).
DEFAULT_RESOURCES: Mapping[str, Any] = {
    "requests": {"cpu": "100m", "memory": "256Mi"},
    "limits": {"memory": "1Gi"},
}


@dataclass(frozen=True, slots=True)
class StorageSpec:
    size: str = "10Gi"
    storage_class: str | None = None
    # StatefulSet persistentVolumeClaimRetentionPolicy: Retain keeps a hub's ledgers when the
    # pool is deleted or scaled down, which is the safe default for data users may still need.
    when_deleted: str = "Retain"
    when_scaled: str = "Retain"


@dataclass(frozen=True, slots=True)
class PrometheusSpec:
    url: str
    hub_label: str = "pod"
    selector: str | None = None
    window: str = "2m"


@dataclass(frozen=True, slots=True)
class ScaleDownSpec:
    """``spec.rebalancing.scaleDown``: after a low-load drain has emptied the pool's last hub
    (the one a StatefulSet removes first) and it stayed empty ``empty_for_s``, lower
    ``spec.replicas`` by one, never below ``min_replicas``."""

    enabled: bool = False
    min_replicas: int = 3
    empty_for_s: int = 300


@dataclass(frozen=True, slots=True)
class FanOutSpec:
    """``spec.rebalancing.fanOut``: the operator runs the scaling policy
    (``hedwig.placement.scaling``) on the pool's load reports and spreads a topic whose
    subscribers alone overload its hub over delivery hubs, for topics whose Topic resource
    leaves ``spec.scaling.mode`` at ``auto`` (and topics no Topic manages)."""

    enabled: bool = True
    # Shares of one hub's capacity (``hubCapacity``): fan out above, back to single below.
    above: float = 0.7
    back_below: float = 0.3
    max_hubs: int = 8


@dataclass(frozen=True, slots=True)
class RebalancingSpec:
    """``spec.rebalancing``; ``to_config`` gives the shared policy's settings."""

    enabled: bool = True
    paused: bool = False
    interval_s: int = 60
    overload_margin: float = 0.2
    underload_margin: float = 0.3
    confirmations: int = 3
    cooldown_s: float = 600.0
    # Two moves a cycle: each move pauses a topic briefly, and storms of moves are what users
    # of other systems complain about most (load-balancing notes, complaint 1).
    max_moves_per_cycle: int = 2
    min_topic_rate: float = 1.0
    max_report_age_s: float = 60.0
    low_load_drain: bool = False
    low_load_threshold: float = 0.2
    hub_capacity: float = 50_000.0
    # Ask the owner for a graceful hand-off first; off, moves only delete the owner znode.
    graceful_hand_off: bool = True
    prometheus: PrometheusSpec | None = None
    scale_down: ScaleDownSpec = field(default_factory=ScaleDownSpec)
    fan_out: FanOutSpec = field(default_factory=FanOutSpec)

    def to_scaling(self) -> ScalingConfig:
        """The scaling policy's settings: this spec's capacity and guards, ``fanOut``'s lines."""
        f = self.fan_out
        return ScalingConfig(
            hub_capacity=self.hub_capacity,
            fan_out_above=f.above,
            back_below=f.back_below,
            max_hubs=f.max_hubs,
            confirmations=self.confirmations,
            cooldown_s=self.cooldown_s,
            max_changes_per_cycle=max(1, self.max_moves_per_cycle),
        )

    def to_config(self, min_hubs: int = 1) -> RebalanceConfig:
        """The policy's settings; a drain never leaves fewer than ``min_hubs`` serving hubs
        (the pool's ensemble size, and the scale-down's floor)."""
        if self.scale_down.enabled:
            min_hubs = max(min_hubs, self.scale_down.min_replicas)
        return RebalanceConfig(
            min_hubs=max(1, min_hubs),
            overload_margin=self.overload_margin,
            underload_margin=self.underload_margin,
            confirmations=self.confirmations,
            cooldown_s=self.cooldown_s,
            max_moves_per_cycle=self.max_moves_per_cycle,
            min_topic_rate=self.min_topic_rate,
            max_report_age_s=self.max_report_age_s,
            low_load_drain=self.low_load_drain,
            low_load_threshold=self.low_load_threshold,
            hub_capacity=self.hub_capacity,
        )


@dataclass(frozen=True, slots=True)
class IssuerRef:
    """``spec.security.certManager.issuerRef``: the cert-manager issuer of the hubs' certificate."""

    name: str
    kind: str = "Issuer"
    group: str = "cert-manager.io"


@dataclass(frozen=True, slots=True)
class SecuritySpec:
    """``spec.security``: TLS on both listeners, authentication, ACLs, protected znodes.

    The operator keeps the pool's CAs and certificates in Secrets (``<pool>-ca``,
    ``<pool>-clients-ca``, ``<pool>-hub-tls``) and a ZooKeeper digest in
    ``<pool>-zookeeper``; ``docs/security.md`` describes what each protects.
    """

    # On unless turned off (``enabled: false``), as in the chart: an open pool's hubs run
    # ``--insecure`` and its status says so (the Secured condition).
    enabled: bool = True
    # The audience a ServiceAccount token must be for, and the cluster's issuer (what the
    # API server's --service-account-issuer says).
    audience: str = "hedwig"
    service_account_issuer: str = "https://kubernetes.default.svc.cluster.local"
    # Where the hubs read the issuer's discovery document (the API server, with the pod's
    # CA and token); jwks_url skips discovery.
    api_server: str = "https://kubernetes.default.svc"
    jwks_url: str | None = None
    # Principals allowed everything besides the operator's own.
    super_users: tuple[str, ...] = ()
    # Certificates the operator issues are valid this long, and renewed this long before.
    certificate_days: int = 90
    renew_before_days: int = 30
    # Set: cert-manager issues the hubs' certificate (a Certificate the operator keeps),
    # instead of the operator's own hub CA.
    cert_manager: IssuerRef | None = None


@dataclass(frozen=True, slots=True)
class SchedulingSpec:
    """Where the hub pods may run and how they get their image: passed to the pod template
    as given (the API server validates them against the pod's own schema)."""

    image_pull_secrets: tuple[str, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Mapping[str, Any], ...] = ()
    affinity: Mapping[str, Any] = field(default_factory=dict)
    # None: spread the hubs over nodes (kubernetes.io/hostname), as well as the nodes allow.
    topology_spread: tuple[Mapping[str, Any], ...] | None = None
    priority_class: str | None = None


@dataclass(frozen=True, slots=True)
class AccessSecret:
    """The Secret a pool's metadata store is reached with (``spec.metadata.secretName``): in
    the pool's namespace, and usable only while it is bound to ``pool`` by its label
    (``hedwig_operator.ownership``)."""

    namespace: str
    name: str
    pool: str


@dataclass(frozen=True, slots=True)
class PoolSpec:
    """A HubPool, identified by namespace and name, with its spec and what the handlers need
    from its metadata (uid for owner references, generation, the pause annotation)."""

    namespace: str
    name: str
    image: str
    metadata_url: str
    uid: str = ""
    generation: int = 0
    replicas: int = DEFAULT_REPLICAS
    image_pull_policy: str | None = None
    resources: Mapping[str, Any] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    scheduling: SchedulingSpec = field(default_factory=SchedulingSpec)
    storage: StorageSpec = field(default_factory=StorageSpec)
    metadata_session_timeout_s: float = DEFAULT_METADATA_SESSION_TIMEOUT_S
    region_override: str | None = None
    placement: str = DEFAULT_PLACEMENT
    replication: ReplicationConfig | None = None
    max_message_size: int | None = None
    termination_grace_period_s: int = DEFAULT_GRACE_PERIOD_S
    pre_stop_sleep_s: int = DEFAULT_PRE_STOP_SLEEP_S
    rebalancing: RebalancingSpec = field(default_factory=RebalancingSpec)
    autoscaling: AutoscalingSpec = field(default_factory=AutoscalingSpec)
    paused_by_annotation: bool = False
    security: SecuritySpec = field(default_factory=SecuritySpec)
    # A Secret in the pool's namespace with what a secured etcd asks of its clients
    # (``hedwig.metadata.EtcdAccess``: credentials, ca.crt, tls.crt, tls.key).
    metadata_secret: str | None = None
    # The hubs' external addresses (``spec.external``), if the pool has them.
    external: ExternalSpec | None = None

    @property
    def region(self) -> str:
        return self.region_override or self.name

    @property
    def zookeeper_digest_required(self) -> bool:
        """Whether the pool's region is opened with its ZooKeeper digest alone (a secured
        pool on ZooKeeper; etcd's credentials come from ``store_secret``)."""
        return self.security.enabled and not self.metadata_url.startswith("etcd://")

    @property
    def store_secret(self) -> AccessSecret | None:
        """The metadata store's access Secret, if it has one."""
        if self.metadata_secret is None:
            return None
        return AccessSecret(self.namespace, self.metadata_secret, self.name)

    @property
    def rebalancing_paused(self) -> bool:
        return self.rebalancing.paused or self.paused_by_annotation


def _prometheus(raw: Raw, path: str) -> PrometheusSpec | None:
    if raw.get("prometheus") is None:
        return None
    p = section(raw, "prometheus", path)
    where = f"{path}.prometheus"
    return PrometheusSpec(
        url=req_str(p, "url", where),
        hub_label=opt_str(p, "hubLabel", where) or "pod",
        selector=opt_str(p, "selector", where),
        window=opt_str(p, "window", where) or "2m",
    )


def parse_rebalancing(raw: Raw, path: str = "spec.rebalancing") -> RebalancingSpec:
    d = RebalancingSpec()
    return RebalancingSpec(
        enabled=bool_or(raw, "enabled", path, d.enabled),
        paused=bool_or(raw, "paused", path, d.paused),
        interval_s=int_or(raw, "intervalSeconds", path, d.interval_s, minimum=1),
        overload_margin=float_or(raw, "overloadMargin", path, d.overload_margin),
        underload_margin=float_or(raw, "underloadMargin", path, d.underload_margin),
        confirmations=int_or(raw, "confirmations", path, d.confirmations, minimum=1),
        cooldown_s=float_or(raw, "cooldownSeconds", path, d.cooldown_s),
        max_moves_per_cycle=int_or(raw, "maxMovesPerCycle", path, d.max_moves_per_cycle, minimum=0),
        min_topic_rate=float_or(raw, "minTopicRate", path, d.min_topic_rate),
        max_report_age_s=float_or(raw, "maxReportAgeSeconds", path, d.max_report_age_s),
        low_load_drain=bool_or(raw, "lowLoadDrain", path, d.low_load_drain),
        low_load_threshold=float_or(raw, "lowLoadThreshold", path, d.low_load_threshold),
        hub_capacity=float_or(raw, "hubCapacity", path, d.hub_capacity, minimum=1.0),
        graceful_hand_off=bool_or(raw, "gracefulHandOff", path, d.graceful_hand_off),
        prometheus=_prometheus(raw, path),
        scale_down=_scale_down(raw, path),
        fan_out=_fan_out(raw, path),
    )


def _fan_out(raw: Raw, path: str) -> FanOutSpec:
    if raw.get("fanOut") is None:
        return FanOutSpec()
    s = section(raw, "fanOut", path)
    where = f"{path}.fanOut"
    d = FanOutSpec()
    spec = FanOutSpec(
        enabled=bool_or(s, "enabled", where, d.enabled),
        above=float_or(s, "above", where, d.above),
        back_below=float_or(s, "backBelow", where, d.back_below),
        max_hubs=int_or(s, "maxHubs", where, d.max_hubs, minimum=2),
    )
    if not 0 < spec.back_below < spec.above:
        raise SpecError(where, "backBelow must be above 0 and below above")
    return spec


def _scale_down(raw: Raw, path: str) -> ScaleDownSpec:
    if raw.get("scaleDown") is None:
        return ScaleDownSpec()
    s = section(raw, "scaleDown", path)
    where = f"{path}.scaleDown"
    d = ScaleDownSpec()
    return ScaleDownSpec(
        enabled=bool_or(s, "enabled", where, d.enabled),
        min_replicas=int_or(s, "minReplicas", where, d.min_replicas, minimum=1),
        empty_for_s=int_or(s, "emptyForSeconds", where, d.empty_for_s, minimum=0),
    )


def _storage(raw: Raw) -> StorageSpec:
    path = "spec.storage"
    d = StorageSpec()
    size = raw.get("size", d.size)
    if isinstance(size, bool) or not isinstance(size, str | int):
        raise SpecError(f"{path}.size", "must be a quantity such as 10Gi")
    when_deleted = opt_str(raw, "whenDeleted", path) or d.when_deleted
    when_scaled = opt_str(raw, "whenScaled", path) or d.when_scaled
    for key, value in (("whenDeleted", when_deleted), ("whenScaled", when_scaled)):
        if value not in RETENTION_POLICIES:
            raise SpecError(f"{path}.{key}", f"must be Retain or Delete, got {value!r}")
    return StorageSpec(
        size=str(size),
        storage_class=opt_str(raw, "storageClassName", path),
        when_deleted=when_deleted,
        when_scaled=when_scaled,
    )


def parse_security(raw: Raw, path: str = "spec.security") -> SecuritySpec:
    d = SecuritySpec()
    users = raw.get("superUsers") or []
    if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
        raise SpecError(f"{path}.superUsers", "must be a list of principals")
    days = int_or(raw, "certificateDays", path, d.certificate_days, minimum=2)
    renew = int_or(raw, "renewBeforeDays", path, d.renew_before_days, minimum=1)
    if renew >= days:
        raise SpecError(f"{path}.renewBeforeDays", "must be less than certificateDays")
    return SecuritySpec(
        enabled=bool_or(raw, "enabled", path, d.enabled),
        audience=opt_str(raw, "audience", path) or d.audience,
        service_account_issuer=opt_str(raw, "serviceAccountIssuer", path)
        or d.service_account_issuer,
        api_server=opt_str(raw, "apiServer", path) or d.api_server,
        jwks_url=opt_str(raw, "jwksUrl", path),
        super_users=tuple(users),
        certificate_days=days,
        renew_before_days=renew,
        cert_manager=_issuer_ref(raw, path),
    )


def _issuer_ref(raw: Raw, path: str) -> IssuerRef | None:
    if raw.get("certManager") is None:
        return None
    where = f"{path}.certManager"
    ref = section(section(raw, "certManager", path), "issuerRef", where)
    where = f"{where}.issuerRef"
    name = opt_str(ref, "name", where)
    if not name:
        raise SpecError(f"{where}.name", "names the Issuer or ClusterIssuer to use")
    kind = opt_str(ref, "kind", where) or "Issuer"
    if kind not in ("Issuer", "ClusterIssuer"):
        raise SpecError(f"{where}.kind", f"must be Issuer or ClusterIssuer, got {kind!r}")
    return IssuerRef(name, kind, opt_str(ref, "group", where) or "cert-manager.io")


def _objects(raw: Raw, key: str, path: str) -> tuple[Mapping[str, Any], ...]:
    value = raw.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise SpecError(f"{path}.{key}", "must be a list of objects")
    return tuple(value)


def _scheduling(spec: Raw) -> SchedulingSpec:
    secrets = _objects(spec, "imagePullSecrets", "spec")
    names = tuple(str(s.get("name", "")) for s in secrets)
    if not all(names):
        raise SpecError("spec.imagePullSecrets", "every entry needs a name")
    selector = section(spec, "nodeSelector", "spec")
    spread = spec.get("topologySpreadConstraints")
    return SchedulingSpec(
        image_pull_secrets=names,
        node_selector={str(k): str(v) for k, v in selector.items()},
        tolerations=_objects(spec, "tolerations", "spec"),
        affinity=dict(section(spec, "affinity", "spec")),
        topology_spread=None
        if spread is None
        else _objects(spec, "topologySpreadConstraints", "spec"),
        priority_class=opt_str(spec, "priorityClassName", "spec"),
    )


def _metadata_store(spec: Raw) -> tuple[str, float, str | None]:
    """The store the hubs use: ``spec.metadata.url`` (any store URL: ZooKeeper's
    ``HOST:PORT[,...]`` or ``zk://``, ``etcd://``), its session timeout, and the Secret an etcd
    store's access comes from (``spec.metadata.secretName``)."""
    md = section(spec, "metadata", "spec")
    url = req_str(md, "url", "spec.metadata")
    secret = opt_str(md, "secretName", "spec.metadata")
    if secret is not None and not url.lower().startswith("etcd://"):
        raise SpecError(
            "spec.metadata.secretName",
            "only an etcd:// store takes an access Secret (ZooKeeper's digest is the pool's "
            "own, under spec.security)",
        )
    timeout = float_or(
        md, "sessionTimeoutSeconds", "spec.metadata", DEFAULT_METADATA_SESSION_TIMEOUT_S
    )
    return url, timeout, secret


def parse_pool(body: Raw) -> PoolSpec:
    """A HubPool object (as the API server returns it) to a ``PoolSpec``."""
    meta = section(body, "metadata", "")
    spec = section(body, "spec", "")
    annotations = section(meta, "annotations", "metadata")
    store_url, session_timeout_s, metadata_secret = _metadata_store(spec)
    placement = opt_str(spec, "placement", "spec") or DEFAULT_PLACEMENT
    if placement not in POLICIES:
        raise SpecError("spec.placement", f"must be one of {', '.join(POLICIES)}")
    rebalancing = parse_rebalancing(section(spec, "rebalancing", "spec"))
    security = parse_security(section(spec, "security", "spec"))
    return PoolSpec(
        namespace=req_str(meta, "namespace", "metadata"),
        name=req_str(meta, "name", "metadata"),
        uid=opt_str(meta, "uid", "metadata") or "",
        generation=int_or(meta, "generation", "metadata", 0),
        image=req_str(spec, "image", "spec"),
        metadata_url=store_url,
        replicas=int_or(spec, "replicas", "spec", DEFAULT_REPLICAS, minimum=0),
        image_pull_policy=opt_str(spec, "imagePullPolicy", "spec"),
        resources=dict(section(spec, "resources", "spec")) or dict(DEFAULT_RESOURCES),
        scheduling=_scheduling(spec),
        storage=_storage(section(spec, "storage", "spec")),
        metadata_session_timeout_s=session_timeout_s,
        region_override=opt_str(spec, "region", "spec"),
        placement=placement,
        replication=replication(spec, "replication", "spec"),
        max_message_size=opt_int(spec, "maxMessageSizeBytes", "spec", minimum=1),
        termination_grace_period_s=int_or(
            spec, "terminationGracePeriodSeconds", "spec", DEFAULT_GRACE_PERIOD_S
        ),
        pre_stop_sleep_s=int_or(
            spec, "preStopSleepSeconds", "spec", DEFAULT_PRE_STOP_SLEEP_S, minimum=0
        ),
        rebalancing=rebalancing,
        autoscaling=parse_autoscaling(spec),
        security=security,
        metadata_secret=metadata_secret,
        external=parse_external(spec, secured=security.enabled),
        paused_by_annotation=str(annotations.get(ANNOTATION_REBALANCE_PAUSED, "")).lower()
        == "true",
    )
