"""A vehicle's position report: the message vehicles publish, as compact JSON.

    {"v": "car-17", "x": 1234.5, "y": 880.0, "kmh": 42.0, "t": 1767225600000}

``t`` is the vehicle's clock in epoch milliseconds: the heat map aggregates by event time
(``t``), not by when the hub stored the message, so a late report lands in the right window.
The key of each message is the vehicle id, the value this JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# The same fields for Spark's from_json.
SPARK_SCHEMA = "v STRING, x DOUBLE, y DOUBLE, kmh DOUBLE, t LONG"


@dataclass(frozen=True, slots=True)
class Position:
    vehicle: str
    x: float
    y: float
    kmh: float
    time_ms: int

    def to_json(self) -> bytes:
        return json.dumps(
            {
                "v": self.vehicle,
                "x": round(self.x, 1),
                "y": round(self.y, 1),
                "kmh": round(self.kmh, 1),
                "t": self.time_ms,
            },
            separators=(",", ":"),
        ).encode()

    @classmethod
    def from_json(cls, raw: bytes) -> Position:
        d = json.loads(raw)
        return cls(str(d["v"]), float(d["x"]), float(d["y"]), float(d["kmh"]), int(d["t"]))
