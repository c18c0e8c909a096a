"""The Topic spec, and the ``TopicConfig`` record it becomes in the topic's znode.

``topicName`` defaults to ``metadata.name`` because Kubernetes names cannot hold every topic
name (``a/b``, capitals, 255 bytes), while most topics are plain; the CRD makes it immutable.
Whether the hubs accept the name is decided by the core's own ``validate_name``, not by a copy
of its rules, so the operator and the hubs can never disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from hedwig.metadata import TopicConfig
from hedwig_operator.specs.common import (
    Raw,
    enum_or,
    int_or,
    opt_int,
    opt_str,
    replication,
    req_str,
    section,
)


class DeletionPolicy(str, Enum):
    # Deleting the Topic leaves the topic and its messages in place (the safe default: a
    # mistaken `kubectl delete` must not lose data, and no finalizer is needed).
    KEEP = "Keep"
    # Deleting the Topic deletes the topic's metadata (znodes, ledger records) first, behind a
    # finalizer.
    DELETE = "Delete"


class ScalingMode(str, Enum):
    """How the topic is served (``hedwig.metadata.plans``): ``Auto`` leaves the plan to
    whoever sets it (``hedwig topic mode``, the hubs' ``--auto-fan-out`` policy); ``Single``
    and ``FanOut`` pin it; ``Ingest`` (lanes) is refused until lanes exist."""

    AUTO = "auto"
    SINGLE = "single"
    FAN_OUT = "fanOut"
    INGEST = "ingest"


# Delivery hubs of a pinned fan-out topic when ``maxHubs`` is not given.
DEFAULT_FAN_OUT_HUBS = 2


@dataclass(frozen=True, slots=True)
class TopicSpec:
    namespace: str
    name: str
    pool: str
    topic_name: str
    uid: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    # The record the topic's znode must hold (replication, retention, message size, expiry);
    # unset fields take the region default.
    topic_config: TopicConfig = field(default_factory=TopicConfig)
    deletion_policy: DeletionPolicy = DeletionPolicy.KEEP
    scaling_mode: ScalingMode = ScalingMode.AUTO
    # At most this many delivery hubs (fan-out); None: DEFAULT_FAN_OUT_HUBS.
    max_hubs: int | None = None

    def config(self) -> TopicConfig:
        """The record the topic's znode must hold; unset fields take the region default."""
        return self.topic_config


def parse_topic_config(raw: Raw, path: str) -> TopicConfig:
    """A topic's configuration as a Topic's spec (or a HedwigNamespace's ``topicDefaults``)
    holds it: replication, retention, maximum message size, expiry; unset fields are None."""
    retention = section(raw, "retention", path)
    expiry = section(raw, "expiry", path)
    return TopicConfig(
        replication=replication(raw, "replication", path),
        retention_ms=opt_int(retention, "timeMs", f"{path}.retention", minimum=0),
        retention_bytes=opt_int(retention, "sizeBytes", f"{path}.retention", minimum=0),
        max_message_size=opt_int(raw, "maxMessageSizeBytes", path, minimum=1),
        inactive_topic_expiry_ms=opt_int(expiry, "topicInactiveMs", f"{path}.expiry", minimum=1000),
        subscription_expiry_ms=opt_int(
            expiry, "subscriptionInactiveMs", f"{path}.expiry", minimum=1000
        ),
    )


def parse_topic(body: Raw) -> TopicSpec:
    """A Topic object (as the API server returns it) to a ``TopicSpec``."""
    meta = section(body, "metadata", "")
    spec = section(body, "spec", "")
    name = req_str(meta, "name", "metadata")
    deletion_policy = enum_or(
        spec, "deletionPolicy", "spec", DeletionPolicy.KEEP, "must be Keep or Delete"
    )
    scaling = section(spec, "scaling", "spec")
    scaling_mode = enum_or(
        scaling, "mode", "spec.scaling", ScalingMode.AUTO, "must be auto, single, fanOut or ingest"
    )
    return TopicSpec(
        namespace=req_str(meta, "namespace", "metadata"),
        name=name,
        uid=opt_str(meta, "uid", "metadata") or "",
        generation=int_or(meta, "generation", "metadata", 0),
        creation_timestamp=opt_str(meta, "creationTimestamp", "metadata") or "",
        pool=req_str(spec, "pool", "spec"),
        topic_name=opt_str(spec, "topicName", "spec") or name,
        topic_config=parse_topic_config(spec, "spec"),
        deletion_policy=deletion_policy,
        scaling_mode=scaling_mode,
        max_hubs=opt_int(scaling, "maxHubs", "spec.scaling", minimum=1),
    )
