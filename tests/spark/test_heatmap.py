"""The heat-map job on a scripted set of vehicles: the cells, counts and speeds it must find."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hedwig.client import SyncClient
from jobs import traffic_heatmap
from traffic.grid import Grid
from traffic.positions import Position

from .helpers import read_topic

pytestmark = pytest.mark.timeout(300)

BASE_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a multiple of every window size used


def script(grid: Grid) -> list[Position]:
    """Three vehicles, three cells, two quadrants, within seconds 1..5 of BASE."""
    w = grid.cell_w
    return [
        # car-a crawls through cell (0, 0): 30, 40, 50 km/h
        Position("car-a", 0.2 * w, 0.5 * w, 30.0, BASE_MS + 1000),
        Position("car-a", 0.5 * w, 0.5 * w, 40.0, BASE_MS + 2000),
        Position("car-a", 0.8 * w, 0.5 * w, 50.0, BASE_MS + 3000),
        # car-b and car-c share cell (5, 3)
        Position("car-b", 5.5 * w, 3.5 * w, 20.0, BASE_MS + 1000),
        Position("car-c", 5.6 * w, 3.4 * w, 60.0, BASE_MS + 2000),
        # car-c then drives into quadrant (1, 0), cell (9, 1)
        Position("car-c", 9.5 * w, 1.5 * w, 45.0, BASE_MS + 5000),
    ]


def test_heatmap_job_finds_the_scripted_cells(
    spark: SparkSession, hubs: str, topic: str, tmp_path: Path
) -> None:
    grid = Grid(topic_prefix=f"{topic}.quadrant")
    with SyncClient(hubs.split(",")) as client:
        for p in script(grid):
            client.publish(grid.topic_at(p.x, p.y), p.to_json(), key=p.vehicle.encode())
        client.publish(grid.topic(1, 1), b"not json")  # ignored, not fatal
    out_topic, out_dir = f"{topic}.heatmap", tmp_path / "cells"
    args = traffic_heatmap.parser().parse_args(
        [
            "--hubs",
            hubs,
            "--grid",
            grid.to_json(),
            "--output-topic",
            out_topic,
            "--output-dir",
            str(out_dir),
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--available-now",
        ]
    )
    query = traffic_heatmap.start(spark, args)
    query.awaitTermination(180)
    assert query.exception() is None

    # Every report lies in three 30 s windows sliding by 10 s; look at the one starting at BASE.
    published = [json.loads(bytes(r.value)) for r in read_topic(spark, hubs, out_topic).collect()]
    at_base = {
        (m["cx"], m["cy"]): (m["reports"], m["mean_kmh"], m["vehicles"])
        for m in published
        if m["window_start"] == BASE_MS
    }
    assert at_base == {(0, 0): (3, 40.0, 1), (5, 3): (2, 40.0, 2), (9, 1): (1, 45.0, 1)}
    assert {m["window_start"] for m in published} == {BASE_MS - 20_000, BASE_MS - 10_000, BASE_MS}
    assert len(published) == 9

    files = spark.read.parquet(str(out_dir)).where(f"window_start = timestamp_millis({BASE_MS})")
    assert {(r.cx, r.cy, r.reports) for r in files.collect()} == {(0, 0, 3), (5, 3, 2), (9, 1, 1)}
