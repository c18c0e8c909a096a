"""The HedwigNamespace spec, and the ``NamespacePolicy`` record it becomes in the pool's
region.

``spec.name`` is the namespace, ``tenant/namespace``; whether it is one is decided by the core's
own ``checked_namespace`` (``hedwig.protocol.names.namespace_name``), not by a copy of its rules,
so the operator and the hubs never disagree (the CRD's pattern and rule refuse the same names
earlier, at the API server). ``topicDefaults`` holds the fields of a Topic's configuration, parsed
by the same code; ``autoCreate``, ``maxTopics`` and ``maxSubscriptionsPerTopic`` are the
namespace's own settings. Every field is optional: unset, the region's default (quotas: none).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hedwig.errors import InvalidTopicError, MetadataError
from hedwig.metadata.records.namespaces import NO_POLICY, NamespacePolicy, checked_namespace
from hedwig_operator.specs.common import Raw, SpecError, int_or, opt_int, opt_str, req_str, section
from hedwig_operator.specs.topic import parse_topic_config


@dataclass(frozen=True, slots=True)
class NamespaceSpec:
    namespace: str  # the Kubernetes namespace of the resource
    name: str  # the resource's name
    pool: str
    namespace_name: str  # the Hedwig namespace, tenant/namespace
    uid: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    policy: NamespacePolicy = field(default_factory=lambda: NO_POLICY)


def _auto_create(spec: Raw) -> bool | None:
    value = spec.get("autoCreate")
    if value is not None and not isinstance(value, bool):
        raise SpecError("spec.autoCreate", "must be true or false")
    return value


def parse_namespace(body: Raw) -> NamespaceSpec:
    """A HedwigNamespace object (as the API server returns it) to a ``NamespaceSpec``."""
    meta = section(body, "metadata", "")
    spec = section(body, "spec", "")
    raw_name = req_str(spec, "name", "spec")
    try:
        namespace_name = checked_namespace(raw_name)
    except InvalidTopicError as exc:
        raise SpecError("spec.name", f"must be tenant/namespace: {exc}") from exc
    try:
        policy = NamespacePolicy(
            topics=parse_topic_config(section(spec, "topicDefaults", "spec"), "spec.topicDefaults"),
            auto_create=_auto_create(spec),
            max_topics=opt_int(spec, "maxTopics", "spec", minimum=0),
            max_subscriptions=opt_int(spec, "maxSubscriptionsPerTopic", "spec", minimum=0),
        )
    except MetadataError as exc:  # pragma: no cover - every field is checked above
        raise SpecError("spec", str(exc)) from exc
    return NamespaceSpec(
        namespace=req_str(meta, "namespace", "metadata"),
        name=req_str(meta, "name", "metadata"),
        pool=req_str(spec, "pool", "spec"),
        namespace_name=namespace_name,
        uid=opt_str(meta, "uid", "metadata") or "",
        generation=int_or(meta, "generation", "metadata", 0),
        creation_timestamp=opt_str(meta, "creationTimestamp", "metadata") or "",
        policy=policy,
    )
