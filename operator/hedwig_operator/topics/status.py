"""A Topic's status, built from its reconciliation's outcome: the Ready condition (with its
reason and message), and what the snapshot says (owner, subscribers, backlog, plan, rates).

The status is a merge patch: a field set to ``None`` is removed, so a field that no longer
applies (rates the owner stopped reporting) does not linger.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from hedwig.metadata import PlanMode, TopicPlan
from hedwig_operator.conditions import condition
from hedwig_operator.specs import ScalingMode
from hedwig_operator.topics.snapshot import TopicSnapshot


def build_topic_status(
    *,
    generation: int,
    topic_name: str | None,
    ready: bool,
    reason: str,
    message: str,
    previous: Mapping[str, Any] | None,
    snapshot: TopicSnapshot | None = None,
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """The Topic's status (a merge patch: ``None`` removes a field that no longer applies)."""
    previous = previous or {}
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "topicName": topic_name,
        "conditions": [condition("Ready", ready, reason, message, previous.get("conditions"), now)],
    }
    if snapshot is not None:
        status["owner"] = snapshot.owner
        status["subscribers"] = snapshot.subscribers
        status["backlog"] = snapshot.backlog
        status["lastSeq"] = snapshot.last_seq
        plan = snapshot.plan or TopicPlan()
        status["plan"] = {
            "mode": MODE_NAMES[plan.mode],
            "hubs": list(plan.hubs),
            "generation": plan.generation,
            # ingest: the lanes, each with the hub it was meant for and whether it is sealed.
            "lanes": [
                {"index": lane.index, "hub": lane.hub, "sealed": lane.sealed} for lane in plan.lanes
            ],
        }
        load = snapshot.load
        status["rates"] = (
            {
                "messagesInPerSecond": load.msg_in,
                "messagesOutPerSecond": load.msg_out,
                "bytesInPerSecond": load.bytes_in,
                "bytesOutPerSecond": load.bytes_out,
            }
            if load is not None
            else None
        )
    return status


# The plan's modes as the Topic's spec and status name them.
MODE_NAMES = {
    PlanMode.SINGLE: ScalingMode.SINGLE.value,
    PlanMode.FAN_OUT: ScalingMode.FAN_OUT.value,
    PlanMode.INGEST: ScalingMode.INGEST.value,
}
