"""Placement holds of one hub: what it remembers of the topics it sent elsewhere, and for how
long (every topic of a claim wave passes through some hub's table)."""

from __future__ import annotations

from hedwig.clock import ManualClock
from hedwig.hub.choices import ASSIGNMENT_HOLD_S, HubChoices
from hedwig.hub.config import HubConfig
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore


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
