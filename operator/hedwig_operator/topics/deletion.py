"""Deleting a Topic's data: behind a finalizer, and only where it is sure whose data it is.

Deleting a Topic with ``deletionPolicy: Delete`` deletes the topic's znodes and its ledgers'
metadata, behind a finalizer that ``hedwig.io/finalizer: "false"`` turns off; ``Keep`` needs no
finalizer, nothing happens to the data. A topic another Topic resource manages, or whose pool
is gone (there is then no way to know where its data is), is left alone and an event says so.
The owner deletes the topic if a hub can (its ledgers' replicas too), else its records are
deleted directly; its lanes go after it, the same way.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

from hedwig.errors import InvalidTopicError, MetadataError, NoLedgerMetadataError
from hedwig.metadata import ANY_VERSION, MetadataStore
from hedwig.protocol.names import lane_name, validate_name
from hedwig_operator.context import Context
from hedwig_operator.resources import ANNOTATION_FINALIZER
from hedwig_operator.specs import DeletionPolicy, PoolSpec, SpecError, parse_pool, parse_topic
from hedwig_operator.topics.claims import TopicClaim, conflict_winner, pool_ref
from hedwig_operator.topics.errors import TransientError

log = logging.getLogger(__name__)


def wants_finalizer(body: Mapping[str, Any]) -> bool:
    """Whether deleting this Topic must wait for its data to be deleted."""
    spec = body.get("spec") or {}
    annotations = (body.get("metadata") or {}).get("annotations") or {}
    if str(annotations.get(ANNOTATION_FINALIZER, "")).lower() == "false":
        return False
    return spec.get("deletionPolicy") == DeletionPolicy.DELETE.value


async def delete_topic_data(
    ctx: Context, body: Mapping[str, Any], claims: Iterable[TopicClaim]
) -> str:
    """Delete the topic's znodes and ledger records; returns what was done, for the event.

    Raises ``TransientError`` if ZooKeeper cannot be reached (the caller retries, holding the
    finalizer). Does nothing to a topic another Topic resource manages, or whose pool is gone
    (there is then no way to know where its data is; the data is kept and an event says so).
    """
    try:
        spec = parse_topic(body)
        validate_name(spec.topic_name)
    except (SpecError, InvalidTopicError):
        return "nothing to delete: the Topic never named a valid topic"
    topic = spec.topic_name
    winner = conflict_winner(claims, topic)
    if winner is not None and winner.name != spec.name:
        return f"data kept: topic {topic!r} is managed by Topic {winner.name}"
    pool_body = await ctx.kube.get(pool_ref(spec.namespace, spec.pool))
    if pool_body is None:
        return f"data kept: HubPool {spec.pool} is gone, so its ZooKeeper is unknown"
    pool: PoolSpec = parse_pool(pool_body)
    try:
        store = await ctx.metadata.for_pool(pool)
        if not await store.topics.topic_exists(topic):
            return f"topic {topic!r} did not exist in region {pool.region!r}"
        plan = await store.plans.read_plan(topic)
        lanes = [lane.index for lane in plan.value.lanes if lane.index] if plan else []
        alive = [h.address for h in await store.hubs.list_hubs() if h.alive]
        done = await _delete_one(ctx, store, alive, topic)
        # Its lanes after it (``docs/architecture.md``, "Lanes"), the same way.
        for index in lanes:
            name = lane_name(topic, index)
            if await store.topics.topic_exists(name):
                await _delete_one(ctx, store, alive, name)
    except MetadataError as exc:
        raise TransientError(f"ZooKeeper of pool {pool.name}: {exc}") from exc
    lanes_done = f" and its {len(lanes)} lane(s)" if lanes else ""
    return f"deleted topic {topic!r}{lanes_done} from region {pool.region!r} {done}"


async def _delete_one(ctx: Context, store: MetadataStore, alive: list[str], topic: str) -> str:
    """Delete one topic (or lane): through its owner if a hub can, else its records."""
    ranges = await store.persistence.read_topic_persistence_info(topic)
    # Best: the owner deletes it (its ledgers' replicas too) through the protocol.
    why_not = (
        await ctx.hubs.delete(alive, topic, ctx.settings.activate_timeout_s)
        if alive
        else "no hub is alive"
    )
    if why_not is None:
        return "through its owner"
    log.info("topic %r: deleting its records directly (%s)", topic, why_not)
    # The topic node first: its owner notices its owner record vanish and stops serving.
    await store.topics.delete_topic(topic)
    ledgers = [r.ledger_id for r in ranges.value.ranges] if ranges is not None else []
    for ledger_id in ledgers:
        with contextlib.suppress(NoLedgerMetadataError):
            await store.ledgers.delete_ledger(ledger_id, ANY_VERSION)
    return f"with the metadata of {len(ledgers)} ledger(s)"
