"""Tenants and namespaces: how topic names are read, and a namespace's policy record."""

from __future__ import annotations

import pytest

from hedwig.errors import InvalidTopicError, MetadataError
from hedwig.metadata.records.namespaces import NO_POLICY, NamespacePolicy, effective_config
from hedwig.metadata.records.topics import ReplicationConfig, TopicConfig
from hedwig.protocol.names import (
    DEFAULT_NAMESPACE,
    DEFAULT_TENANT,
    decode_name,
    encode_name,
    namespace_name,
    namespace_of,
)

DEFAULTS = (DEFAULT_TENANT, DEFAULT_NAMESPACE)


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ("acme/web/clicks", ("acme", "web")),
        ("acme/web/a/b/c", ("acme", "web")),
        ("t-1/ns.2/x", ("t-1", "ns.2")),
        ("clicks", DEFAULTS),
        ("region/cell-12", DEFAULTS),
        ("acme/web/", DEFAULTS),
        ("./web/x", DEFAULTS),
        ("acme/../x", DEFAULTS),
        ("ac me/web/x", DEFAULTS),
        ("/web/x", DEFAULTS),
        (f"{'t' * 64}/web/x", DEFAULTS),
    ],
)
def test_namespace_of(topic: str, expected: tuple[str, str]) -> None:
    assert namespace_of(topic) == expected


def test_prefixed_names_keep_their_one_segment_encoding() -> None:
    assert encode_name("acme/web/clicks") == "acme%2Fweb%2Fclicks"
    assert decode_name(encode_name("acme/web/clicks")) == "acme/web/clicks"


def test_namespace_name_checks_its_parts() -> None:
    assert namespace_name("acme", "web") == "acme/web"
    for tenant, namespace in [("", "web"), ("acme", "a/b"), ("..", "web"), ("acme", "é")]:
        with pytest.raises(InvalidTopicError):
            namespace_name(tenant, namespace)


def test_policy_round_trips_through_json() -> None:
    policy = NamespacePolicy(
        topics=TopicConfig(
            replication=ReplicationConfig(3, 2, 2), retention_ms=60_000, max_message_size=1024
        ),
        auto_create=False,
        max_topics=10,
        max_subscriptions=2,
    )
    assert NamespacePolicy.from_json(policy.to_json()) == policy
    assert NamespacePolicy.from_json(b"") == NO_POLICY
    assert NO_POLICY.to_json() == b"{}"


@pytest.mark.parametrize(
    "bad",
    [
        {"max_topics": -1},
        {"max_subscriptions": True},
        {"auto_create": "yes"},
        {"topics": {"retention_ms": 1}},
    ],
)
def test_policy_refuses_bad_values(bad: dict[str, object]) -> None:
    with pytest.raises(MetadataError):
        NamespacePolicy(**bad)  # type: ignore[arg-type]


def test_policy_refuses_a_corrupt_record() -> None:
    with pytest.raises(MetadataError):
        NamespacePolicy.from_json(b'{"max_topics": "ten"}')
    with pytest.raises(MetadataError):
        NamespacePolicy.from_json(b"[1]")
    with pytest.raises(MetadataError):
        NamespacePolicy.from_json(b'{"topics": [1]}')
    with pytest.raises(MetadataError):
        NamespacePolicy.from_json(b'{"topics": {"retention_ms": "long"}}')


def test_effective_config_topic_over_namespace_over_region() -> None:
    region = TopicConfig(
        replication=ReplicationConfig(1, 1, 1), retention_ms=1, max_message_size=100
    )
    namespace = NamespacePolicy(
        topics=TopicConfig(retention_ms=2, max_message_size=200), max_topics=5
    )
    own = TopicConfig(retention_ms=3)
    got = effective_config(own, namespace, region)
    assert got.retention_ms == 3  # the topic's own
    assert got.max_message_size == 200  # the namespace's
    assert got.replication == ReplicationConfig(1, 1, 1)  # the region's
    assert effective_config(None, None, region) is region
    assert effective_config(None, namespace, region).retention_ms == 2
    assert effective_config(own, None, region).max_message_size == 100
