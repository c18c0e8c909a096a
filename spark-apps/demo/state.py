"""What the demo page shows, kept up to date by the watchers and read by the web server.

The heat-map topic holds one message per (window, cell) each time Spark updates that cell;
we keep the latest per (window start, cell). The page shows one window: the oldest of those
that contain the newest reports, i.e. the most complete window that is still live (with
30 s windows sliding every 10 s, the one that started 20 s before the newest).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from traffic.grid import Grid


@dataclass
class HubView:
    address: str
    alive: bool
    msg_in: float = 0.0
    topics: int = 0


@dataclass
class DemoState:
    grid: Grid
    window_ms: int
    slide_ms: int
    # (window_start, cx, cy) -> (reports, mean_kmh, vehicles)
    cells: dict[tuple[int, int, int], tuple[int, float, int]] = field(default_factory=dict)
    owners: dict[str, str | None] = field(default_factory=dict)
    hubs: list[HubView] = field(default_factory=list)
    hub_order: list[str] = field(default_factory=list)
    published: int = 0
    heatmap_messages: int = 0
    moves: int = 0
    updated_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add_cell(self, message: dict[str, Any]) -> None:
        key = (int(message["window_start"]), int(message["cx"]), int(message["cy"]))
        value = (int(message["reports"]), float(message["mean_kmh"]), int(message["vehicles"]))
        with self.lock:
            self.cells[key] = value
            self.heatmap_messages += 1
            self.updated_ms = int(time.time() * 1000)
            self._forget_old()

    def _forget_old(self) -> None:
        if len(self.cells) < 20_000:
            return
        newest = max(k[0] for k in self.cells)
        for k in [k for k in self.cells if k[0] < newest - 10 * self.window_ms]:
            del self.cells[k]

    def shown_window(self) -> int | None:
        starts = {k[0] for k in self.cells}
        if not starts:
            return None
        wanted = max(starts) - (self.window_ms - self.slide_ms)
        return wanted if wanted in starts else max(starts)

    def set_cluster(self, owners: dict[str, str | None], hubs: list[HubView]) -> None:
        with self.lock:
            for topic, owner in owners.items():
                before = self.owners.get(topic)
                if before is not None and owner is not None and owner != before:
                    self.moves += 1
            self.owners = owners
            self.hubs = hubs
            for h in hubs:
                if h.address not in self.hub_order:
                    self.hub_order.append(h.address)

    def to_json(self) -> dict[str, Any]:
        g = self.grid
        with self.lock:
            window = self.shown_window()
            cells = [
                [cx, cy, *value] for (start, cx, cy), value in self.cells.items() if start == window
            ]
            quadrants = []
            for qy in range(g.quadrants_y):
                for qx in range(g.quadrants_x):
                    topic = g.topic(qx, qy)
                    owner = self.owners.get(topic)
                    quadrants.append(
                        {
                            "qx": qx,
                            "qy": qy,
                            "topic": topic,
                            "owner": owner,
                            "hub": self.hub_order.index(owner) if owner in self.hub_order else None,
                        }
                    )
            return {
                "grid": {
                    "cells_x": g.cells_x,
                    "cells_y": g.cells_y,
                    "cells_per_quadrant": g.cells_per_quadrant,
                    "quadrants_x": g.quadrants_x,
                    "quadrants_y": g.quadrants_y,
                    "cell_m": round(g.cell_w),
                },
                "window": None
                if window is None
                else {"start": window, "end": window + self.window_ms},
                "cells": sorted(cells),
                "quadrants": quadrants,
                "hubs": [
                    {
                        "index": self.hub_order.index(h.address),
                        "address": h.address,
                        "alive": h.alive,
                        "msg_in": round(h.msg_in, 1),
                        "topics": h.topics,
                    }
                    for h in self.hubs
                ],
                "published": self.published,
                "heatmap_messages": self.heatmap_messages,
                "moves": self.moves,
                "updated_ms": self.updated_ms,
            }
