"""Performing one move: graceful hand-off when the owner supports it, else (or if it did not
happen in time) deleting the topic's owner znode.

Deleting the owner record is always safe: the owner notices through its watch and stops at
once, and a new owner fences the old ledger before writing, so the old owner cannot
acknowledge anything more (docs/architecture.md). The delete is version-checked against the
record read before the move, so a record written since (the topic already moved) is left
alone. Afterwards a hub is asked to take the topic straight away, the planned destination
first, so clients find an owner without waiting for their own retries.

The planned destination is advisory: the hub that claims a free topic decides by its
placement policy (a destination-aware hand-off is the hub's graceful move).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from hedwig.errors import BadVersionError, HedwigError, NoTopicOwnerInfoError
from hedwig.metadata import MetadataStore
from hedwig.placement.rebalance import Move
from hedwig_operator.hubs import HubRequests
from hedwig_operator.settings import OperatorSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class MoveOutcome:
    move: Move
    # "graceful" (the owner handed over), "forced" (owner znode deleted), "skipped".
    method: str
    new_owner: str | None
    detail: str

    @property
    def performed(self) -> bool:
        return self.method != "skipped"


async def perform_move(
    store: MetadataStore,
    hubs: HubRequests,
    move: Move,
    alive: Sequence[str],
    settings: OperatorSettings,
    *,
    graceful: bool = True,
) -> MoveOutcome:
    topic = move.topic
    before = await store.ownership.read_owner_info(topic)
    if before is None or before.value.address != move.source:
        now = before.value.address if before is not None else "nobody"
        return MoveOutcome(move, "skipped", now, f"owner changed since the plan (now {now})")
    why_not = (
        await hubs.release(
            move.source,
            topic,
            move.destination,
            move.reason,
            settings.graceful_move_timeout_s,
            move.kind,
        )
        if graceful
        else "graceful hand-off is off for this pool"
    )
    after = await store.ownership.read_owner_info(topic)
    method = "graceful"
    detail = "the owner handed the topic over"
    if after is not None and after.version == before.version and after.value == before.value:
        # The hand-off did not happen: take the topic away.
        try:
            await store.ownership.delete_owner_info(topic, before.version)
            method = "forced"
            detail = f"owner znode deleted ({why_not or 'hand-off did not complete'})"
        except (NoTopicOwnerInfoError, BadVersionError):
            detail = "the owner released the topic while we were about to delete its record"
    targets = [a for a in ([move.destination] if move.destination else []) if a in alive]
    targets += [a for a in alive if a not in targets and a != move.source]
    if targets:
        try:
            await hubs.activate(targets, topic, settings.activate_timeout_s)
        except (HedwigError, TimeoutError, OSError) as exc:
            log.info("topic %r: no hub took it at once after the move: %r", topic, exc)
    owner = await store.ownership.read_owner_info(topic)
    return MoveOutcome(move, method, owner.value.address if owner else None, detail)
