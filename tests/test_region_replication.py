"""Cross-region application in memory: two regions' logs, each replicating the other through
``RemoteApplier`` exactly as a replicating owner does (deliveries from the remote log after
the remote subscription's mark, runs appended, the mark moved after the append)."""

from __future__ import annotations

import random

import pytest

from hedwig.errors import UsageError
from hedwig.hub.replicating.applying import (
    RemoteApplier,
    learn_applied,
    origin_of,
    origin_publisher_id,
)
from hedwig.hub.replicating.links import (
    RegionLink,
    ReplicationPolicy,
    carrying_regions,
    parse_links,
)
from hedwig.protocol.messages.delivered import DeliveredMessage
from hedwig.settings import HubConfig


class Region:
    """A region's log of one topic: (publisher id, publisher seq, value) per sequence id."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.log: list[tuple[str, int, bytes]] = []
        self.marks: dict[str, int] = {}  # hub subscriptions' consumed marks

    def publish(self, publisher: str, value: bytes) -> None:
        self.log.append((publisher, 0, value))

    def deliver(self, subscriber: str, window: int) -> list[DeliveredMessage]:
        start = self.marks.get(subscriber, 0)
        out = []
        for seq in range(start + 1, min(len(self.log), start + window) + 1):
            pid, _, value = self.log[seq - 1]
            out.append(DeliveredMessage(seq, 0, pid, value))
        return out

    def stored(self) -> list[tuple[str, int, int]]:
        return [(pid, pseq, 1) for pid, pseq, _ in self.log]


def replicate_once(
    applier: RemoteApplier, remote: Region, local: Region, window: int, *, crash: bool = False
) -> None:
    plan = applier.plan(remote.deliver(f"__{local.name}", window))
    for run in plan.runs:
        for i, m in enumerate(run.messages):
            local.log.append((run.publisher_id, run.origin_seq + i, m.value))
        applier.applied_run(run)
    if crash:
        return  # appended, not acknowledged
    if plan.ack:
        remote.marks[f"__{local.name}"] = plan.ack
    applier.done(plan)


def check_exactly_once(regions: list[Region], published: dict[str, list[bytes]]) -> None:
    for r in regions:
        seen: dict[str, list[bytes]] = {}
        for pid, _, value in r.log:
            origin = origin_of(pid)
            publisher = pid if origin is None else origin[1]
            seen.setdefault(publisher, []).append(value)
        assert seen == published, r.name


def test_two_regions_exactly_once_in_order_no_loop_across_crashes() -> None:
    rnd = random.Random(7)
    a, b = Region("a"), Region("b")
    appliers = {("a", "b"): RemoteApplier("b"), ("b", "a"): RemoteApplier("a")}
    published: dict[str, list[bytes]] = {"pa": [], "pb": []}
    for step in range(400):
        for region, pub in ((a, "pa"), (b, "pb")):
            for _ in range(rnd.randint(0, 3)):
                value = f"{pub}-{len(published[pub])}".encode()
                region.publish(pub, value)
                published[pub].append(value)
        for (local_name, remote_name), applier in list(appliers.items()):
            local, remote = (a, b) if local_name == "a" else (b, a)
            crash = rnd.random() < 0.1
            replicate_once(applier, remote, local, rnd.randint(1, 5), crash=crash)
            if crash:
                # kill -9 of the replicating owner: the new one learns from the log alone
                fresh = RemoteApplier(
                    remote_name, applied=learn_applied(remote_name, local.stored())
                )
                appliers[(local_name, remote_name)] = fresh
        if step % 50 == 0:
            assert appliers[("a", "b")].lag(len(b.log)) >= 0
    for _ in range(1000):  # drain
        for (local_name, _), applier in appliers.items():
            local, remote = (a, b) if local_name == "a" else (b, a)
            replicate_once(applier, remote, local, 10)
    check_exactly_once([a, b], published)
    assert appliers[("a", "b")].lag(len(b.log)) == 0
    assert appliers[("b", "a")].lag(len(a.log)) == 0


def test_replicated_messages_are_not_sent_back() -> None:
    a, b = Region("a"), Region("b")
    a.publish("p", b"x")
    to_b = RemoteApplier("a")
    replicate_once(to_b, a, b, 10)
    assert b.log == [(origin_publisher_id("a", "p"), 1, b"x")]
    back = RemoteApplier("b").plan(b.deliver("__a", 10))
    assert back.runs == () and back.skipped == 1 and back.ack == 1


def test_runs_split_by_publisher_and_gap() -> None:
    msgs = [
        DeliveredMessage(1, 0, "p", b"1"),
        DeliveredMessage(2, 0, "p", b"2"),
        DeliveredMessage(3, 0, "q", b"3"),
        DeliveredMessage(4, 0, origin_publisher_id("c", "r"), b"4"),
        DeliveredMessage(5, 0, "q", b"5"),
    ]
    plan = RemoteApplier("b", applied=1).plan(msgs)
    assert [(r.publisher_id, r.origin_seq, len(r.messages)) for r in plan.runs] == [
        ("@b/p", 2, 1),
        ("@b/q", 3, 1),
        ("@b/q", 5, 1),
    ]
    assert plan.skipped == 2 and plan.ack == 5


def test_links_and_policy() -> None:
    links = parse_links("b=10.0.0.1:4080,10.0.0.2:4080; c=h:1", local_region="a")
    assert links[0] == RegionLink(region="b", endpoints=("10.0.0.1:4080", "10.0.0.2:4080"))
    assert carrying_regions(links, ReplicationPolicy()) == links
    assert carrying_regions(links, ReplicationPolicy(regions=frozenset({"c"}))) == links[1:]
    for bad in ("a=h:1", "b=h:1;b=h:2", "b", "b=nohost", "b="):
        with pytest.raises(UsageError):
            parse_links(bad, local_region="a")
    assert origin_of("plain") is None
    assert origin_of(origin_publisher_id("b", "p/1")) == ("b", "p/1")


def test_links_are_a_hub_setting() -> None:
    config = HubConfig.from_env(
        {"HEDWIG_REGION": "a", "HEDWIG_REGION_LINKS": "b=h1:4080,h2:4080;c=h3:1"}
    )
    assert [link.region for link in config.replication.links("a")] == ["b", "c"]
    assert HubConfig.from_env({}, region_links="").replication.links("default") == ()
    with pytest.raises(UsageError, match="itself"):
        HubConfig.from_env({"HEDWIG_REGION": "a"}, region_links="a=h:1")
    with pytest.raises(UsageError, match="bad endpoint"):
        HubConfig.from_env({}, region_links="b=nohost")
    with pytest.raises(UsageError, match="bad region name"):
        HubConfig.from_env({}, region_links="@b=h:1")


def test_the_cross_region_checker_finds_loops_losses_doubles_and_disorder() -> None:
    from tests.failure.history import History
    from tests.failure.regions import problems_across

    a = [(1, "pa", b"pa0:0"), (2, "pa", b"pa0:1"), (3, "@b/pb0", b"pb0:0")]
    b = [(1, "pb0", b"pb0:0"), (2, "@a/pa", b"pa0:0"), (3, "@a/pa", b"pa0:1")]
    acked = {"a": History(), "b": History()}
    acked["a"].acked["t"] = [(b"pa0:0", 1), (b"pa0:1", 2)]
    assert problems_across({"a": {"t": a}, "b": {"t": b}}, acked) == []
    looped = [*a, (4, "@a/pa", b"pa0:1")]
    assert any(
        "came back" in p for p in problems_across({"a": {"t": looped}, "b": {"t": b}}, acked)
    )
    doubled = [*b, (4, "@a/pa", b"pa0:1")]
    assert any(
        "more than once" in p for p in problems_across({"a": {"t": a}, "b": {"t": doubled}}, acked)
    )
    lost = b[:2]
    found = problems_across({"a": {"t": a}, "b": {"t": lost}}, acked)
    assert any("missing" in p for p in found)
    swapped = [b[0], b[2], b[1]]
    found = problems_across({"a": {"t": a}, "b": {"t": swapped}}, acked)
    assert any("order" in p for p in found)


def test_a_topics_regions_in_its_record() -> None:
    from hedwig.errors import MetadataError
    from hedwig.metadata.records import TopicConfig

    own = TopicConfig(regions=("b", "c"))
    assert TopicConfig.from_json(own.to_json()) == own
    assert TopicConfig.from_json(TopicConfig(regions=()).to_json()).regions == ()
    assert TopicConfig.from_json(TopicConfig(retention_ms=1).to_json()).regions is None
    assert TopicConfig(retention_ms=1).merged(own).regions == ("b", "c")
    assert TopicConfig(regions=()).merged(own).regions == ()
    with pytest.raises(MetadataError):
        TopicConfig(regions=("b/c",))
