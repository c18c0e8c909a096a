"""The map: a rectangle cut into quadrants (one topic each), and quadrants into heat-map cells.

Seed 003's design: "a map will be divided into equal-sized quadrants and the location data for
each quadrant is stored in a single data stream". A vehicle publishes each position to the
topic of the quadrant it is in, so a reader interested in one part of the city reads only
that part's topic. The heat map is finer than the quadrants: ``cells`` per quadrant side.

Coordinates are metres from the map's south-west corner; x grows east, y north.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True)
class Grid:
    # 4 km x 4 km: a small city, crossed in a few minutes at 60 km/h.
    width_m: float = 4000.0
    height_m: float = 4000.0
    # 2 x 2 quadrants: four topics, enough to spread over three hubs.
    quadrants_x: int = 2
    quadrants_y: int = 2
    # 8 x 8 cells per quadrant: 250 m cells, a city block or two.
    cells_per_quadrant: int = 8
    topic_prefix: str = "traffic.quadrant"

    def __post_init__(self) -> None:
        if min(self.width_m, self.height_m) <= 0:
            raise ValueError("the map needs a positive width and height")
        if min(self.quadrants_x, self.quadrants_y, self.cells_per_quadrant) < 1:
            raise ValueError("quadrants and cells must be at least 1 per side")

    @property
    def cells_x(self) -> int:
        return self.quadrants_x * self.cells_per_quadrant

    @property
    def cells_y(self) -> int:
        return self.quadrants_y * self.cells_per_quadrant

    @property
    def cell_w(self) -> float:
        return self.width_m / self.cells_x

    @property
    def cell_h(self) -> float:
        return self.height_m / self.cells_y

    def contains(self, x: float, y: float) -> bool:
        return 0 <= x < self.width_m and 0 <= y < self.height_m

    def cell_of(self, x: float, y: float) -> tuple[int, int]:
        cx = min(self.cells_x - 1, max(0, math.floor(x / self.cell_w)))
        cy = min(self.cells_y - 1, max(0, math.floor(y / self.cell_h)))
        return cx, cy

    def quadrant_of(self, x: float, y: float) -> tuple[int, int]:
        cx, cy = self.cell_of(x, y)
        return cx // self.cells_per_quadrant, cy // self.cells_per_quadrant

    def topic(self, qx: int, qy: int) -> str:
        return f"{self.topic_prefix}-{qx}-{qy}"

    def topic_at(self, x: float, y: float) -> str:
        return self.topic(*self.quadrant_of(x, y))

    def topics(self) -> list[str]:
        return [
            self.topic(qx, qy) for qy in range(self.quadrants_y) for qx in range(self.quadrants_x)
        ]

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Grid:
        return cls(**json.loads(text))
