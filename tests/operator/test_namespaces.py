"""HedwigNamespace reconciliation against an in-memory region and a fake API server: the
policy record written by compare-and-set, the status's usage against limits, refusals, and
deletion; and a hub's policy watcher seeing a changed quota without a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import yaml
from hedwig_operator.namespaces import (
    claim_of,
    delete_namespace_policy,
    reconcile_namespace,
    status_changed,
    wants_finalizer,
)
from hedwig_operator.specs import SpecError, parse_namespace, parse_topic

from hedwig.clock import SystemClock
from hedwig.errors import QuotaExceededError
from hedwig.hub.owning.namespaces import NamespaceWatcher
from hedwig.metadata import ReplicationConfig, TopicConfig
from hedwig.metadata.records.namespaces import NamespacePolicy

from .fakes import World, namespace_body, pool_body, topic_body
from .test_specs_and_crds import crd, schema

ROOT = Path(__file__).resolve().parents[2]


def ready(status: dict[str, Any]) -> tuple[str, str, str]:
    (c,) = status["conditions"]
    assert c["type"] == "Ready"
    return c["status"], c["reason"], c["message"]


async def world_with_pool() -> World:
    w = await World().start()
    w.kube.put(pool_body(spec={"region": "r1"}))
    return w


FULL_SPEC: dict[str, Any] = {
    "topicDefaults": {
        "replication": {"ensemble": 3, "writeQuorum": 2, "ackQuorum": 2},
        "retention": {"timeMs": 60000, "sizeBytes": 1024},
        "maxMessageSizeBytes": 4096,
        "expiry": {"topicInactiveMs": 5000, "subscriptionInactiveMs": 6000},
    },
    "autoCreate": False,
    "maxTopics": 3,
    "maxSubscriptionsPerTopic": 2,
}


def test_spec_parses_into_the_policy_record() -> None:
    spec = parse_namespace(namespace_body(spec=FULL_SPEC))
    assert spec.namespace_name == "acme/web"
    assert spec.policy == NamespacePolicy(
        topics=TopicConfig(
            ReplicationConfig(3, 2, 2),
            retention_ms=60000,
            retention_bytes=1024,
            max_message_size=4096,
            inactive_topic_expiry_ms=5000,
            subscription_expiry_ms=6000,
        ),
        auto_create=False,
        max_topics=3,
        max_subscriptions=2,
    )
    # Nothing set: nothing of its own, the region's defaults and no quota.
    assert parse_namespace(namespace_body()).policy == NamespacePolicy()


def test_topic_defaults_are_a_topics_configuration_parsed_by_the_same_code() -> None:
    """The same fields as a Topic's configuration, with the same meaning and checks."""
    defaults = FULL_SPEC["topicDefaults"]
    as_topic = parse_topic(topic_body(spec=defaults)).topic_config
    assert parse_namespace(namespace_body(spec=FULL_SPEC)).policy.topics == as_topic
    ns_props = schema("hedwignamespaces")["properties"]["spec"]["properties"]
    topic_props = schema("topics")["properties"]["spec"]["properties"]
    for key, value in ns_props["topicDefaults"]["properties"].items():
        assert _checks(value) == _checks(topic_props[key]), key


def _checks(node: Any) -> Any:
    """A schema without its descriptions: what it checks."""
    if isinstance(node, dict):
        return {k: _checks(v) for k, v in node.items() if k != "description"}
    return node


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"name": "acme"}, "spec.name"),
        ({"name": "acme/web/x"}, "spec.name"),
        ({"name": "../web"}, "spec.name"),
        ({"name": "acme/.."}, "spec.name"),
        ({"name": "ac me/web"}, "spec.name"),
        ({"name": ""}, "spec.name"),
        ({"maxTopics": -1}, "spec.maxTopics"),
        ({"maxTopics": "3"}, "spec.maxTopics"),
        ({"maxSubscriptionsPerTopic": True}, "spec.maxSubscriptionsPerTopic"),
        ({"autoCreate": "yes"}, "spec.autoCreate"),
        ({"topicDefaults": {"maxMessageSizeBytes": 0}}, "spec.topicDefaults.maxMessageSizeBytes"),
        (
            {"topicDefaults": {"replication": {"ensemble": 1, "writeQuorum": 2, "ackQuorum": 1}}},
            "spec.topicDefaults.replication",
        ),
        ({"pool": ""}, "spec.pool"),
    ],
)
def test_invalid_specs_name_their_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_namespace(namespace_body(spec=spec))
    assert err.value.path == field


def test_the_crd_refuses_the_names_the_core_refuses() -> None:
    """The CRD's pattern and rule admit a name exactly when ``namespace_name`` does (the
    rule's . and .. checks, written out in Python, on the same strings)."""
    import re

    name = schema("hedwignamespaces")["properties"]["spec"]["properties"]["name"]
    pattern = re.compile(name["pattern"])
    (dots, _immutable) = name["x-kubernetes-validations"]
    assert "startsWith('./')" in dots["rule"] and "endsWith('/..')" in dots["rule"]

    def crd_admits(s: str) -> bool:
        parts_ok = not (
            s.startswith("./") or s.startswith("../") or s.endswith("/.") or s.endswith("/..")
        )
        return bool(pattern.fullmatch(s)) and parts_ok and len(s) <= name["maxLength"]

    for s in ["acme/web", "a/b", "A-1/x.y_z", "acme", "a/b/c", "./x", "x/..", "a b/c", "é/x",
              "x" * 63 + "/y", "x" * 64 + "/y", "../x", ".../x"]:  # fmt: skip
        try:
            parse_namespace(namespace_body(spec={"name": s}))
            core = True
        except SpecError:
            core = False
        assert crd_admits(s) == core, s


def test_crd_names_columns_and_the_operators_names() -> None:
    c = crd("hedwignamespaces")
    assert c["spec"]["names"]["kind"] == "HedwigNamespace"
    (version,) = c["spec"]["versions"]
    assert version["subresources"]["status"] == {}
    columns = {col["name"]: col["jsonPath"] for col in version["additionalPrinterColumns"]}
    assert columns["Topics"] == ".status.usage.topics"
    assert columns["Max Topics"] == ".status.limits.topics"
    assert columns["Ready"] == '.status.conditions[?(@.type=="Ready")].status'
    chart = ROOT / "charts" / "hedwig" / "crds" / "hedwignamespaces.hedwig.io.yaml"
    assert yaml.safe_load(chart.read_text()) == c


async def test_namespace_gets_its_policy_and_usage_against_limits() -> None:
    w = await world_with_pool()
    body = namespace_body(spec=FULL_SPEC)
    status, retry = await reconcile_namespace(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert not retry
    assert ready(status)[:2] == ("True", "Applied")
    assert status["namespaceName"] == "acme/web"
    assert status["usage"] == {"topics": 0}
    assert status["limits"] == {"topics": 3, "subscriptionsPerTopic": 2}
    assert status["observedGeneration"] == 1
    stored = await w.operator_store.namespaces.read_namespace("acme/web")
    assert stored is not None and stored.value == parse_namespace(body).policy

    # Topics counted by the hubs show in the usage; an unchanged spec writes nothing.
    for t in ("a", "b", "c"):
        await w.hub_store.namespaces.count_topic("acme/web", f"acme/web/{t}", 3)
    status, _ = await reconcile_namespace(w.ctx, body, [])
    assert status["usage"] == {"topics": 3}
    assert "3 of 3 topics (full" in ready(status)[2]
    same = await w.operator_store.namespaces.read_namespace("acme/web")
    assert same is not None and same.version == stored.version

    # A changed quota is written by compare-and-set; a limit taken away leaves the status.
    body["spec"]["maxTopics"] = 5
    del body["spec"]["maxSubscriptionsPerTopic"]
    status, _ = await reconcile_namespace(w.ctx, body, [])
    after = await w.operator_store.namespaces.read_namespace("acme/web")
    assert after is not None and after.value.max_topics == 5
    assert after.value.max_subscriptions is None
    assert status["limits"] == {"topics": 5, "subscriptionsPerTopic": None}


async def test_a_record_changed_or_deleted_by_hand_is_made_the_spec_again() -> None:
    w = await world_with_pool()
    body = namespace_body(spec={"maxTopics": 3})
    await reconcile_namespace(w.ctx, body, [])
    current = await w.hub_store.namespaces.read_namespace("acme/web")
    assert current is not None
    await w.hub_store.namespaces.write_namespace(
        "acme/web", NamespacePolicy(max_topics=100), current.version
    )
    await reconcile_namespace(w.ctx, body, [])
    back = await w.operator_store.namespaces.read_namespace("acme/web")
    assert back is not None and back.value.max_topics == 3
    await w.hub_store.namespaces.delete_namespace("acme/web", back.version)
    await reconcile_namespace(w.ctx, body, [])
    again = await w.operator_store.namespaces.read_namespace("acme/web")
    assert again is not None and again.value.max_topics == 3


async def test_invalid_spec_missing_pool_and_conflicts_touch_nothing() -> None:
    w = await world_with_pool()
    bad = namespace_body(spec={"name": "acme/../x"})
    status, retry = await reconcile_namespace(w.ctx, bad, [])
    assert ready(status)[:2] == ("False", "InvalidSpec")
    assert "spec.name" in ready(status)[2]
    assert not retry
    assert claim_of(bad) is None

    lost = namespace_body(pool="nope")
    status, retry = await reconcile_namespace(w.ctx, lost, [])
    assert ready(status)[:2] == ("False", "PoolNotFound")
    assert retry

    first = namespace_body("first", created="2026-01-01T00:00:00Z", spec={"maxTopics": 1})
    second = namespace_body("second", created="2026-01-02T00:00:00Z", spec={"maxTopics": 9})
    claims = [claim_of(first), claim_of(second)]
    await reconcile_namespace(w.ctx, first, claims)  # type: ignore[arg-type]
    status, _ = await reconcile_namespace(w.ctx, second, claims)  # type: ignore[arg-type]
    assert ready(status)[:2] == ("False", "ResourceConflict")
    assert "managed by HedwigNamespace first" in ready(status)[2]
    # The loser's deletion leaves the winner's record.
    outcome = await delete_namespace_policy(w.ctx, second, claims)  # type: ignore[arg-type]
    assert outcome.startswith("policy kept")
    kept = await w.operator_store.namespaces.read_namespace("acme/web")
    assert kept is not None and kept.value.max_topics == 1
    assert await w.operator_store.namespaces.list_namespaces() == {"acme/web": kept}


async def test_store_down_is_not_ready_and_retried() -> None:
    w = await world_with_pool()
    w.zookeeper_down()
    status, retry = await reconcile_namespace(w.ctx, namespace_body(), [])
    assert ready(status)[:2] == ("False", "StoreUnavailable")
    assert retry


async def test_deletion_deletes_the_record_and_keeps_the_topics_counted() -> None:
    w = await world_with_pool()
    body = namespace_body(spec={"maxTopics": 3})
    await reconcile_namespace(w.ctx, body, [])
    await w.hub_store.namespaces.count_topic("acme/web", "acme/web/a", 3)
    outcome = await delete_namespace_policy(w.ctx, body, [claim_of(body)])  # type: ignore[list-item]
    assert "deleted the policy of namespace 'acme/web'" in outcome
    assert await w.operator_store.namespaces.read_namespace("acme/web") is None
    assert await w.operator_store.namespaces.topic_count("acme/web") == 1
    again = await delete_namespace_policy(w.ctx, body, [])
    assert "had no policy" in again
    # No pool: nothing known of where the record is; kept, and said so.
    assert (await delete_namespace_policy(w.ctx, namespace_body(pool="gone"), [])).startswith(
        "policy kept"
    )


def test_finalizer_unless_turned_off() -> None:
    body = namespace_body()
    assert wants_finalizer(body)
    body["metadata"]["annotations"] = {"hedwig.io/finalizer": "false"}
    assert not wants_finalizer(body)


def test_status_changed_ignores_what_a_merge_patch_removes() -> None:
    old = {"usage": {"topics": 3}, "limits": {"topics": 5}, "observedGeneration": 1}
    assert not status_changed(old, {"limits": {"topics": 5, "subscriptionsPerTopic": None}})
    assert not status_changed(old, {"namespaceName": None, "usage": {"topics": 3}})
    assert status_changed(old, {"usage": {"topics": 4}})
    assert status_changed(old, {"limits": {"topics": None}})


async def test_a_changed_quota_reaches_a_hubs_watcher_without_a_restart() -> None:
    """The hubs' own watcher of the policies (``NamespaceWatcher``) on the hub's store sees
    the operator's record, and a changed ``maxTopics`` admits topics it refused before."""
    w = await world_with_pool()
    body = namespace_body(spec={"maxTopics": 1})
    await reconcile_namespace(w.ctx, body, [])
    watcher = NamespaceWatcher(w.hub_store, clock=SystemClock())
    await watcher.start()
    try:
        await watcher.admit("acme/web/a")
        with pytest.raises(QuotaExceededError) as refused:
            await watcher.admit("acme/web/b")
        assert (refused.value.namespace, refused.value.quota, refused.value.limit) == (
            "acme/web",
            "max_topics",
            1,
        )
        body["spec"]["maxTopics"] = 2
        body["metadata"]["generation"] = 2
        status, _ = await reconcile_namespace(w.ctx, body, [])
        for _ in range(100):  # the watch fires on the loop: a few turns of it
            policy = watcher.policies.get("acme/web")
            if policy is not None and policy.max_topics == 2:
                break
            await asyncio.sleep(0.01)
        await watcher.admit("acme/web/b")
        assert await w.operator_store.namespaces.topic_count("acme/web") == 2
        status, _ = await reconcile_namespace(w.ctx, body, [])
        assert status["usage"] == {"topics": 2} and status["limits"]["topics"] == 2
        # Another namespace is not limited by it.
        for n in range(3):
            await watcher.admit(f"t2/ns/x{n}")
    finally:
        watcher.stop()


async def test_a_pool_its_worker_has_is_not_read_again() -> None:
    """The pool passed in (its worker's view) is the one used: the API server is not asked."""
    w = await World().start()
    status, _ = await reconcile_namespace(
        w.ctx, namespace_body(), [], pool_body=pool_body(spec={"region": "r1"})
    )
    assert ready(status)[:2] == ("True", "Applied")
    status, _ = await reconcile_namespace(w.ctx, namespace_body(), [])
    assert ready(status)[:2] == ("False", "PoolNotFound")
