"""Vehicles driving on a grid of roads, each reporting its position to its quadrant's topic.

The city has straight roads along every other row and column of heat-map cells; every third
one is an arterial (faster). Vehicles drive along a road, may turn at each crossing, and turn
back at the edge of the map. Downtown (the centre) is congested: speeds fall towards it, so
vehicles spend longer in the central cells and the heat map shows a hot centre with fast,
cool arterials, which is what the demo should make visible at a glance.

``Simulator`` is pure and seeded (tests can script it); ``publish_positions`` drives it in
real time and publishes through a ``HedwigClient``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from hedwig.client import HedwigClient
from traffic.grid import Grid
from traffic.positions import Position

log = logging.getLogger(__name__)

TURN_PROBABILITY = 0.3
# Share of turning vehicles that turn towards the centre of the map.
DOWNTOWN_BIAS = 0.7
ARTERIAL_KMH = 60.0
LOCAL_KMH = 35.0
# Congestion: speed is multiplied by 1 - DEPTH * exp(-(distance / RADIUS)^2).
CONGESTION_DEPTH = 0.75
CONGESTION_RADIUS_FRACTION = 0.2


@dataclass
class Vehicle:
    id: str
    horizontal: bool  # drives along x (a road of fixed y) or along y
    line: float  # the road's fixed coordinate
    pos: float  # the moving coordinate
    direction: int  # +1 or -1

    @property
    def xy(self) -> tuple[float, float]:
        return (self.pos, self.line) if self.horizontal else (self.line, self.pos)


class Simulator:
    def __init__(self, grid: Grid, vehicles: int, *, seed: int = 3) -> None:
        self.grid = grid
        self.rng = random.Random(seed)
        self.xs = [(2 * k + 0.5) * grid.cell_w for k in range((grid.cells_x + 1) // 2)]
        self.ys = [(2 * k + 0.5) * grid.cell_h for k in range((grid.cells_y + 1) // 2)]
        self.vehicles = [self._spawn(f"car-{i}") for i in range(vehicles)]

    def _spawn(self, name: str) -> Vehicle:
        horizontal = self.rng.random() < 0.5
        lines, span = (self.ys, self.grid.width_m) if horizontal else (self.xs, self.grid.height_m)
        return Vehicle(
            name,
            horizontal,
            self.rng.choice(lines),
            self.rng.uniform(0, span),
            self.rng.choice((1, -1)),
        )

    def speed_kmh(self, v: Vehicle) -> float:
        lines = self.ys if v.horizontal else self.xs
        arterial = lines.index(v.line) % 3 == 0
        base = ARTERIAL_KMH if arterial else LOCAL_KMH
        x, y = v.xy
        g = self.grid
        d = math.hypot(x - g.width_m / 2, y - g.height_m / 2)
        radius = CONGESTION_RADIUS_FRACTION * min(g.width_m, g.height_m)
        congestion = 1 - CONGESTION_DEPTH * math.exp(-((d / radius) ** 2))
        return max(3.0, base * congestion * self.rng.uniform(0.85, 1.15))

    def step(self, dt_s: float, now_ms: int) -> list[Position]:
        """Move every vehicle by ``dt_s`` seconds; return their new positions."""
        out = []
        for v in self.vehicles:
            kmh = self.speed_kmh(v)
            self._move(v, kmh / 3.6 * dt_s)
            x, y = v.xy
            out.append(Position(v.id, x, y, kmh, now_ms))
        return out

    def _move(self, v: Vehicle, distance: float) -> None:
        span = self.grid.width_m if v.horizontal else self.grid.height_m
        crossings = self.xs if v.horizontal else self.ys
        old = v.pos
        new = old + v.direction * distance
        passed = [c for c in crossings if min(old, new) < c <= max(old, new)]
        if passed and self.rng.random() < TURN_PROBABILITY:
            at = min(passed, key=lambda c: abs(c - old))
            # Turn onto the crossing road; the rest of the distance is driven next step.
            # Most drivers head downtown: that is where the traffic (and the heat) is.
            v.horizontal, v.line, v.pos = not v.horizontal, at, v.line
            centre = (self.grid.width_m if v.horizontal else self.grid.height_m) / 2
            towards = 1 if v.pos < centre else -1
            v.direction = towards if self.rng.random() < DOWNTOWN_BIAS else -towards
            return
        if new < 0 or new >= span:
            new = min(max(new, 0.0), span - 0.01)
            v.direction = -v.direction
        v.pos = new


async def publish_positions(
    client: HedwigClient,
    sim: Simulator,
    *,
    interval_s: float = 1.0,
    stop: asyncio.Event,
    clock: Callable[[], float] = time.time,
    on_tick: Callable[[int], None] | None = None,
) -> int:
    """Step the simulation every ``interval_s`` and publish; returns messages published."""
    published = 0
    while not stop.is_set():
        started = time.monotonic()
        reports = sim.step(interval_s, int(clock() * 1000))
        futures = [
            client.publish_nowait(sim.grid.topic_at(p.x, p.y), p.to_json(), key=p.vehicle.encode())
            for p in reports
        ]
        results = await asyncio.gather(*futures, return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            log.warning(
                "%d of %d positions not published: %s", len(failed), len(results), failed[0]
            )
        published += len(results) - len(failed)
        if on_tick is not None:
            on_tick(published)
        pause = max(0.0, interval_s - (time.monotonic() - started))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), pause)
    return published
