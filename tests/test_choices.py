"""Placement holds of one hub: what it remembers of the topics it sent elsewhere, and for how
long (every topic of a claim wave passes through some hub's table)."""

from __future__ import annotations

from hedwig.clock import ManualClock
from hedwig.hub.config import HubConfig
from hedwig.hub.owning.choices import ASSIGNMENT_HOLD_S, HubChoices
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.metadata.records import HubLoad, HubStatus
from hedwig.placement import PlacementPolicy


def choices(clock: ManualClock) -> HubChoices:
    return HubChoices(
        address="hub-a:1",
        config=HubConfig(listen="127.0.0.1:0", data_dir="unused"),
        store=MemoryMetadataStore(MemoryBackend(), "mem"),
        clock=clock,
    )


def test_expired_assignments_do_not_pile_up_after_a_claim_wave() -> None:
    clock = ManualClock()
    c = choices(clock)
    for i in range(5_000):
        c.assign(f"wave-{i}", "hub-b:1")
        if i % 1_000 == 999:
            clock.advance(1.0)
    # Pruned every hold period on the way: at most the last two periods' are held.
    assert 1_000 <= len(c._assigned) <= 3_000
    assert c._assigned["wave-4999"][0] == "hub-b:1", "a fresh assignment still holds"
    clock.advance(ASSIGNMENT_HOLD_S + 0.1)
    c.handed_over("late", "hub-b:1")
    # Only what the last hold period assigned is left (a table rebuilt, not emptied in place).
    assert list(c._assigned) == ["late"] and list(c._handed) == ["late"]


def _hub(address: str, topics: int, now_ms: int, msg_in: float = 0.0) -> HubStatus:
    return HubStatus(
        address,
        True,
        load=HubLoad(timestamp_ms=now_ms, topics=topics, msg_in=msg_in, hub_id=address),
    )


def test_a_hub_keeps_an_unowned_topic_while_it_holds_no_more_than_its_share() -> None:
    """Random placement: the hub a request reached claims the topic rather than sending the
    client elsewhere (a redirect each), while its live count is within the margin of the
    mean; past it (one client sending everything to this hub), the policy chooses again."""
    clock = ManualClock()
    c = choices(clock)
    now = clock.wall_ms()
    owned = 1_000
    c.owned = lambda: owned
    hubs = [_hub("hub-a:1", 900, now), _hub("hub-b:1", 1_000, now), _hub("hub-c:1", 1_000, now)]
    assert c.keeps_here(hubs, True, frozenset())
    owned = 1_200  # its report lags: the live count is what counts
    assert not c.keeps_here(hubs, True, frozenset())
    owned = 1_000
    assert not c.keeps_here(hubs, False, frozenset()), "unfit to store it"
    assert not c.keeps_here(hubs, True, frozenset({"hub-a:1"})), "being drained"
    # Its messages count too, as the policy's load does.
    busy = [_hub("hub-a:1", 1_000, now, msg_in=500.0), *hubs[1:]]
    assert not c.keeps_here(busy, True, frozenset())
    # A hub whose load is unknown (no report, or a stale one): the policy decides.
    stale = [*hubs[:2], _hub("hub-c:1", 1_000, now - 10 * 60_000)]
    assert not c.keeps_here(stale, True, frozenset())
    # A region that owns nothing yet still spreads: a few topics, then the policy.
    empty = [_hub("hub-a:1", 0, now), _hub("hub-b:1", 0, now), _hub("hub-c:1", 0, now)]
    owned = 0
    assert c.keeps_here(empty, True, frozenset())
    owned = 40
    assert not c.keeps_here(empty, True, frozenset())


def test_other_policies_always_choose() -> None:
    clock = ManualClock()
    now = clock.wall_ms()
    hubs = [_hub("hub-a:1", 0, now), _hub("hub-b:1", 0, now)]
    for policy in (PlacementPolicy.LEAST_LOADED, PlacementPolicy.CONSISTENT_HASH):
        c = HubChoices(
            address="hub-a:1",
            config=HubConfig(listen="127.0.0.1:0", data_dir="unused", placement=policy),
            store=MemoryMetadataStore(MemoryBackend(), "mem"),
            clock=clock,
        )
        assert not c.keeps_here(hubs, True, frozenset())


async def test_a_claim_goes_first_only_where_the_local_rule_alone_would_decide() -> None:
    """``keeps`` (asked before the owner record is read, to claim first): yes only where
    ``owner_for`` would answer this hub by ``keeps_here``; no where anything else decides,
    a placement held for another hub, a lane's hint, a hub this one cannot reach (a partition:
    then the policy chooses), and it leaves no assignment behind."""
    clock = ManualClock()
    c = choices(clock)
    now = clock.wall_ms()
    c.owned = lambda: 900
    hubs = [_hub("hub-a:1", 900, now), _hub("hub-b:1", 1_000, now), _hub("hub-c:1", 1_000, now)]

    async def alive(max_age_s: float = 0.0) -> list[HubStatus]:
        return hubs

    c._alive = alive  # type: ignore[method-assign]
    assert await c.keeps("t")
    assert await c.owner_for("t") == "hub-a:1"  # as the rule it stands for says
    c.assign("held", "hub-b:1")
    assert not await c.keeps("held")
    cut_off = {"hub-c:1"}
    c.unreachable = lambda hub_id: hub_id in cut_off
    assert not await c.keeps("t"), "a partition: the policy decides, after the owner read"
    cut_off.clear()

    async def hint(name: str) -> str | None:
        return "hub-b:1" if name.endswith("#2") else None

    c.lane_hint = hint
    assert not await c.keeps("ingest#2")
    assert await c.keeps("plain")
    c.owned = lambda: 1_200  # past its share: the policy chooses, after the owner read
    assert not await c.keeps("t")
    assert list(c._assigned) == ["held"]  # asking assigned nothing
