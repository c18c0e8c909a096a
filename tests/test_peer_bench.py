"""The peer benchmark harness itself (bench/peers): a tiny Hedwig-only run through the real
driver processes, the table it renders into the docs, and the fetched Kafka when it is cached.

The comparison with Kafka is ``make bench-peers``; it is far too long for the test suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.peers import fetch
from bench.peers.measure import MEASURED, payload, percentiles, read_stamp
from bench.peers.rounds import Harness
from bench.peers.systems import lines_by_key
from bench.peers.table import BEGIN, END, render, write_docs
from bench.peers.workloads import Workload, by_key


def test_stamp_and_percentiles() -> None:
    value = payload(123_456_789, MEASURED, 100)
    assert len(value) == 100
    assert read_stamp(value) == (123_456_789, MEASURED)
    p = percentiles([i / 1000 for i in range(1, 1001)])
    assert p["n"] == 1000
    assert p["p50_ms"] == 501.0
    assert p["p99_ms"] == 991.0
    assert p["max_ms"] == 1000.0


def test_unknown_workload_is_refused() -> None:
    with pytest.raises(SystemExit, match="unknown workloads"):
        by_key(["9"])


@pytest.mark.integration
def test_tiny_hedwig_run_renders_a_table(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    workloads = [
        Workload(key="1", title="t", nodes=1, topics=1, size=100, messages=2_000),
        Workload(
            key="2a",
            title="t",
            nodes=1,
            topics=2,
            size=100,
            rate=2_000,
            duration_s=1.0,
            warmup=200,
            subscribers=1,
        ),
        Workload(
            key="5",
            title="t",
            nodes=1,
            topics=1,
            size=100,
            messages=2_000,
            subscribers=1,
            backlog=True,
        ),
    ]
    Harness(
        lines=lines_by_key(["hedwig"]),
        workloads=workloads,
        rounds=1,
        out=out,
        classpath=None,
        kafka_python_path=None,
        log=sys.stderr,
    ).run()
    results = {r["workload"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(results) == {"1", "2a", "5"}
    assert all("error" not in r for r in results.values()), results
    assert results["1"]["produce"]["msgs_per_s"] > 0, results
    fixed = results["2a"]
    assert fixed["produce"]["publish"]["n"] == 2_000, fixed
    assert fixed["consume"]["complete"], fixed
    assert fixed["consume"]["e2e"]["n"] == 2_000, fixed  # the warm-up is delivered, not timed
    assert results["5"]["consume"]["received"] == 2_000, results

    table = render([out])
    assert "| 2a: one topic, 100 B, 10,000 msg/s | publish-to-delivery p99, ms |" in table
    docs = tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\nbefore\n{BEGIN}\nold\n{END}\nafter\n")
    write_docs(docs, table)
    text = docs.read_text()
    assert "old" not in text
    assert text.startswith("# Benchmarks\n\nbefore\n") and text.endswith(f"{END}\nafter\n")
    assert table in text


def test_fetched_peers_when_cached() -> None:
    tools = fetch.cached()
    if tools is None:
        pytest.skip("Kafka and confluent-kafka are not fetched (make bench-peers fetches them)")
    jars = {p.name for p in tools.kafka_jars.glob("*.jar")}
    assert f"kafka_2.13-{fetch.KAFKA_VERSION}.jar" in jars
    assert any(j.startswith("log4j-slf4j2-impl") for j in jars)
    assert (tools.python_path / "confluent_kafka" / "__init__.py").exists()
