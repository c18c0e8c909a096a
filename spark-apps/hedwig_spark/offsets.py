"""Offsets: where a read starts and ends in each topic, and how Spark stores them.

An offset is a topic's **next sequence id to read**: ranges are half-open, ``[start, end)``,
exactly like Kafka's offsets, so ``{"traffic": 11}`` as an ending offset reads up to seq 10
and as a starting offset begins at seq 11. Sequence ids start at 1 and have no gaps, so the
number of messages in a range is ``end - start``.

Users write offsets as ``earliest``, ``latest`` or JSON (``{"topicA": 5, "topicB": -2}``) where
-2 means earliest and -1 latest, as in Kafka. Topics a JSON spec does not name start at the
earliest retained message and end at the latest.

A topic served by lanes has an offset per lane, each lane named as its topic is
(``T~lane1``; lane 0 is ``T`` itself): JSON offsets may name lanes, and a lane not named starts
as an unnamed topic does.

Spark keeps streaming offsets in the checkpoint's ``offsets/`` folder as the JSON of a plain
dict ``{topic: next_seq}``; we always build it with sorted keys so that equal offsets are equal
strings (the engine compares them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

EARLIEST = -2
LATEST = -1

Offsets = dict[str, int]


@dataclass(frozen=True, slots=True)
class TopicBounds:
    """What a topic holds now: ``first_available .. last_seq`` (empty if last < first)."""

    first_available: int
    last_seq: int

    @property
    def earliest(self) -> int:
        return max(1, self.first_available)

    @property
    def latest(self) -> int:
        return max(self.last_seq + 1, self.earliest)


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    kind: Literal["earliest", "latest", "json"]
    per_topic: dict[str, int] = field(default_factory=dict)

    def resolve(self, topic: str, bounds: TopicBounds, *, default: int) -> int:
        """The concrete next-seq for ``topic``; ``default`` (EARLIEST/LATEST) for unnamed ones."""
        if self.kind == "earliest":
            value = EARLIEST
        elif self.kind == "latest":
            value = LATEST
        else:
            value = self.per_topic.get(topic, default)
        if value == EARLIEST:
            return bounds.earliest
        if value == LATEST:
            return bounds.latest
        return value


def parse_offset_spec(text: str, which: Literal["starting", "ending"]) -> OffsetSpec:
    name = f"{which}Offsets"
    word = text.strip().lower()
    if word == "earliest":
        if which == "ending":
            raise ValueError("option 'endingOffsets' cannot be 'earliest'")
        return OffsetSpec("earliest")
    if word == "latest":
        return OffsetSpec("latest")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError:
        raise ValueError(
            f"option {name!r} must be 'earliest', 'latest' or JSON {{topic: seq}}, got {text!r}"
        ) from None
    if not isinstance(raw, dict):
        raise ValueError(f"option {name!r} must be a JSON object {{topic: seq}}")
    per_topic: dict[str, int] = {}
    for topic, value in raw.items():
        # Kafka's JSON nests partitions ({"t": {"0": 5}}); a Hedwig topic is one partition.
        if isinstance(value, dict) and len(value) == 1:
            (value,) = value.values()
        if isinstance(value, bool) or not isinstance(value, int) or value < EARLIEST:
            raise ValueError(f"option {name!r}: offset of {topic!r} must be -2, -1 or a seq")
        if value == 0:
            value = EARLIEST  # seq 0 does not exist; read it as "from the start"
        per_topic[str(topic)] = value
    return OffsetSpec("json", per_topic)


def normalise(offsets: Offsets) -> Offsets:
    """The same offsets with sorted keys and int values: the form we hand to Spark."""
    return {topic: int(offsets[topic]) for topic in sorted(offsets)}
