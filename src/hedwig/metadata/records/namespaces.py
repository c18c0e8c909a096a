"""A namespace's policies (``NamespacePolicy``), and a topic's effective configuration.

A namespace (``tenant/namespace``, ``hedwig.protocol.names.namespace_of``) holds the policies of
its topics: a ``TopicConfig`` (``topics``: the defaults of its topics: replication, retention,
expiry, maximum message size), and the namespace's own: whether a publish may create a topic
(``auto_create``), its count quotas (``max_topics`` in the namespace, ``max_subscriptions`` per
topic) and its publish rate quotas (``max_publish_msgs_per_s``, ``max_publish_bytes_per_s``:
over every hub that serves its topics, enforced by slowing publishes down,
``hedwig.hub.front.quotas``; 0 is no limit, as ``None`` is). Every field is optional: ``None``
takes the region's default (for the quotas: no limit).

Resolution is one rule, applied in one place (``effective_config``): a topic's own setting,
else its namespace's, else the region's. A namespace without a record is one whose policies are
all ``None``: the region's defaults throughout, as before namespaces existed.

The record's JSON: ``{"topics": {<a topic's configuration>}, "max_topics": 10, ...}``, keys
left out when ``None``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.metadata.records.topics import NO_CONFIG, TopicConfig
from hedwig.protocol.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    lane_of,
    namespace_name,
    namespace_of,
)


@dataclass(frozen=True, slots=True)
class NamespacePolicy:
    """A namespace's policies; ``None`` fields take the region's default (quotas: no limit).

    ``topics``: the defaults of the namespace's topics, over the region's. ``auto_create``:
    whether a publish or subscription to a topic not yet made makes it (``None``: yes, as in a
    region without namespaces). ``max_topics``: topics the namespace may hold.
    ``max_subscriptions``: subscriptions each of its topics may hold."""

    topics: TopicConfig = NO_CONFIG
    auto_create: bool | None = None
    max_topics: int | None = None
    max_subscriptions: int | None = None
    max_publish_msgs_per_s: int | None = None
    max_publish_bytes_per_s: int | None = None

    QUOTAS: ClassVar[tuple[str, ...]] = ("max_topics", "max_subscriptions")
    # Rate quotas: messages and payload bytes a second published to the namespace's topics,
    # over all hubs; 0 or ``None``: no limit.
    RATES: ClassVar[tuple[str, ...]] = ("max_publish_msgs_per_s", "max_publish_bytes_per_s")

    def __post_init__(self) -> None:
        if not isinstance(self.topics, TopicConfig):
            raise MetadataError(f"topics must be a topic configuration, got {self.topics!r}")
        for name in (*self.QUOTAS, *self.RATES):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise MetadataError(f"{name} must be a whole number, not negative, got {v!r}")
        if self.auto_create is not None and not isinstance(self.auto_create, bool):
            raise MetadataError(f"auto_create must be true or false, got {self.auto_create!r}")

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.topics != NO_CONFIG:
            d["topics"] = self.topics.to_object()
        for name in (*self.QUOTAS, *self.RATES, "auto_create"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return dump_object(d)

    @classmethod
    def from_json(cls, raw: bytes) -> NamespacePolicy:
        d = load_object(raw, "namespace policy")
        if not d:
            return NO_POLICY
        topics = d.get("topics", {})
        if not isinstance(topics, dict):
            raise MetadataError("corrupt namespace policy: topics is not an object")
        try:
            return cls(
                topics=TopicConfig.from_object(topics),
                auto_create=d.get("auto_create"),
                **{name: d.get(name) for name in (*cls.QUOTAS, *cls.RATES)},
            )
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt namespace policy: {exc}") from exc

    @property
    def publish_limits(self) -> tuple[int, int]:
        """Messages and bytes a second the namespace may publish over all hubs (0: no limit)."""
        return (self.max_publish_msgs_per_s or 0, self.max_publish_bytes_per_s or 0)


def checked_namespace(name: str) -> str:
    """``name`` if it names a namespace (``tenant/namespace``, as ``namespace_name`` checks
    it); ``InvalidTopicError`` if not. What every store checks before it files a record."""
    tenant, _, namespace = name.partition("/") if isinstance(name, str) else ("", "", "")
    return namespace_name(tenant, namespace)


UNCOUNTED = f"{DEFAULT_TENANT}/{DEFAULT_NAMESPACE}"


def counted_namespace(topic: str) -> str | None:
    """The namespace whose count of topics ``topic`` is in; ``None``: none (a topic of
    ``public/default``, where every name without a prefix is and which has no topic quota; a
    lane, which belongs to its topic)."""
    if lane_of(topic)[1]:
        return None
    name = "/".join(namespace_of(topic))
    return None if name == UNCOUNTED else name


# A namespace without a record: nothing of its own, the region's defaults throughout.
NO_POLICY = NamespacePolicy()


def effective_config(
    own: TopicConfig | None, namespace: NamespacePolicy | None, region: TopicConfig
) -> TopicConfig:
    """A topic's configuration: its own settings, else its namespace's, else the region's."""
    base = region if namespace is None else namespace.topics.merged(region)
    return base if own is None else own.merged(base)
