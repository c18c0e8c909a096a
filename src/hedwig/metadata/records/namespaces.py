"""A namespace's policies (``NamespacePolicy``), and a topic's effective configuration.

A namespace (``tenant/namespace``, ``hedwig.protocol.names.namespace_of``) holds the policies of
its topics: the settings a ``TopicConfig`` has (replication, retention, expiry, maximum message
size), and the namespace's own: whether a publish may create a topic (``auto_create``), and its
count quotas (``max_topics`` in the namespace, ``max_subscriptions`` per topic). Every field is
optional: ``None`` takes the region's default (for the quotas: no limit).

Resolution is one rule, applied in one place (``effective_config``): a topic's own setting,
else its namespace's, else the region's. A namespace without a record is one whose policies are
all ``None``: the region's defaults throughout, as before namespaces existed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from hedwig.errors import MetadataError
from hedwig.metadata.records.encoding import dump_object, load_object
from hedwig.metadata.records.topics import ReplicationConfig, TopicConfig


@dataclass(frozen=True, slots=True)
class NamespacePolicy:
    """A namespace's policies; ``None`` fields take the region's default (quotas: no limit).

    ``auto_create``: whether a publish to a topic not yet made makes it (``None``: yes, as in a
    region without namespaces). ``max_topics``: topics the namespace may hold.
    ``max_subscriptions``: subscriptions each of its topics may hold."""

    replication: ReplicationConfig | None = None
    retention_ms: int | None = None
    retention_bytes: int | None = None
    max_message_size: int | None = None
    inactive_topic_expiry_ms: int | None = None
    subscription_expiry_ms: int | None = None
    auto_create: bool | None = None
    max_topics: int | None = None
    max_subscriptions: int | None = None

    _NUMBERS: ClassVar[tuple[str, ...]] = (
        "retention_ms",
        "retention_bytes",
        "max_message_size",
        "inactive_topic_expiry_ms",
        "subscription_expiry_ms",
        "max_topics",
        "max_subscriptions",
    )

    def __post_init__(self) -> None:
        for name in self._NUMBERS:
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise MetadataError(f"{name} must be a whole number, not negative, got {v!r}")
        if self.auto_create is not None and not isinstance(self.auto_create, bool):
            raise MetadataError(f"auto_create must be true or false, got {self.auto_create!r}")

    def topic_defaults(self) -> TopicConfig:
        """The part of these policies a topic's configuration has."""
        return TopicConfig(
            replication=self.replication,
            retention_ms=self.retention_ms,
            retention_bytes=self.retention_bytes,
            max_message_size=self.max_message_size,
            inactive_topic_expiry_ms=self.inactive_topic_expiry_ms,
            subscription_expiry_ms=self.subscription_expiry_ms,
        )

    def to_json(self) -> bytes:
        d: dict[str, Any] = {}
        if self.replication is not None:
            d["replication"] = asdict(self.replication)
        for name in (*self._NUMBERS, "auto_create"):
            if getattr(self, name) is not None:
                d[name] = getattr(self, name)
        return dump_object(d)

    @classmethod
    def from_json(cls, raw: bytes) -> NamespacePolicy:
        d = load_object(raw, "namespace policy")
        try:
            rep = d.get("replication")
            return cls(
                replication=ReplicationConfig(**rep) if rep else None,
                auto_create=d.get("auto_create"),
                **{name: d.get(name) for name in cls._NUMBERS},
            )
        except (TypeError, ValueError) as exc:
            raise MetadataError(f"corrupt namespace policy: {exc}") from exc


# A namespace without a record: nothing of its own, the region's defaults throughout.
NO_POLICY = NamespacePolicy()


def effective_config(
    own: TopicConfig | None, namespace: NamespacePolicy | None, region: TopicConfig
) -> TopicConfig:
    """A topic's configuration: its own settings, else its namespace's, else the region's."""
    base = region if namespace is None else namespace.topic_defaults().merged(region)
    return base if own is None else own.merged(base)
