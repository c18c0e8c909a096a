"""The peer benchmark harness itself (bench/peers): a tiny Hedwig-only run through the real
driver processes, the table it renders into the docs, and the fetched Kafka when it is cached.

The comparison with Kafka is ``make bench-peers``; it is far too long for the test suite.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from bench.peers import fetch, merge
from bench.peers.measure import MEASURED, histogram, payload, percentiles, read_stamp
from bench.peers.rounds import Harness
from bench.peers.systems import lines_by_key
from bench.peers.table import BEGIN, END, render, write_docs
from bench.peers.workloads import EACH, NONE, WORKLOADS, Workload, by_key, sent_to


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


def test_every_workload_as_fast_as_acks_come_runs_both_kinds() -> None:
    """Throughput is shown with and without a per-message outcome; a fixed rate times every
    outcome, so it is ``each`` only; fan-out and backlog producers only fill the topic."""
    for w in WORKLOADS:
        if w.rate:
            assert w.kinds == (EACH,), w
        elif not w.subscribers or w.producers > 1:
            assert w.kinds == (EACH, NONE), w
        else:
            assert w.kinds == (NONE,), w
    with pytest.raises(ValueError, match="each only"):
        Workload(key="x", title="t", nodes=1, topics=1, size=1, rate=1.0, kinds=(NONE,))
    with pytest.raises(ValueError, match="does not publish"):
        by_key(["2a"])[0].produce_specs("r", NONE)


def test_openmessaging_shapes() -> None:
    """The OpenMessaging Benchmark's reference shape (1 KB, 4 producers and 4 consumers of
    one subscription), on one node, on three at replication 3 with 2 acks, and over 10,000
    topics; each consumer reads its share of the topics and expects exactly what the
    producers send there."""
    shapes = {w.key: w for w in WORKLOADS if w.producers == 4}
    assert set(shapes) == {"7a", "7b", "7c", "8a", "8b"}
    for w in shapes.values():
        assert (w.size, w.consumers, w.subscribers) == (1024, 4, 1)
        assert (w.replication, w.min_insync) == ((3, 2) if w.nodes == 3 else (1, 1))
    assert shapes["7c"].topics == 10_000 and shapes["7a"].topics == 100
    w = shapes["7b"]
    produce = w.produce_specs("r", EACH)
    assert [p.offset for p in produce] == [0, 25, 50, 75]
    assert all(p.barrier and p.kind == EACH for p in produce)
    assert sum(p.messages for p in produce) == w.messages
    consume = w.consume_specs("r")
    assert [len(c.topics) for c in consume] == [25] * 4
    assert sorted(t for c in consume for t in c.topics) == sorted(produce[0].topics)
    assert sum(c.expected for c in consume) == sum(p.total for p in produce)
    # Uneven: 7 messages from offset 2 over 3 topics go to topics 2, 0, 1, 2, 0, 1, 2.
    assert [sent_to(7, 2, 3, range(t, t + 1)) for t in range(3)] == [2, 2, 3]
    assert sent_to(7, 2, 3, range(3)) == 7


def _report(kind: str, messages: int, outcomes: int, start: int, end: int) -> dict[str, Any]:
    return {
        "kind": kind,
        "messages": messages,
        "start_ns": start,
        "end_ns": end,
        "cpu_s": messages * 2e-6,
        "publish_histogram": histogram([0.001 * (i + 1) for i in range(100)]),
        "outcomes": outcomes,
        "failed": 0,
    }


def test_producers_merge_into_one_result_and_unread_outcomes_fail_it() -> None:
    """Four producers over overlapping seconds are one throughput; their histograms add up
    within 0.1 %; a producer that published each message with an outcome but read fewer
    outcomes marks the run, as does a failed message."""
    reports = [_report(EACH, 1000, 1000, i * 10**8, 10**9 + i * 10**8) for i in range(4)]
    merged = merge.productions(reports)
    assert merged["messages"] == 4000 and merged["seconds"] == 1.3
    assert merged["msgs_per_s"] == round(4000 / 1.3)
    assert merged["client_cpu_us_per_msg"] == 2.0
    assert merged["publish"]["n"] == 400
    assert abs(merged["publish"]["p50_ms"] - 51.0) <= 0.051
    assert abs(merged["publish"]["p99_ms"] - 100.0) <= 0.1
    assert merged["publish"]["max_ms"] == 100.0
    assert merge.problem(merged) is None
    short = merge.productions([*reports[:3], _report(EACH, 1000, 999, 0, 10**9)])
    assert merge.problem(short) == "3999 outcomes read for 4000 messages published each with one"
    sampled = merge.productions([_report(NONE, 1000, 10, 0, 10**9)])
    assert merge.problem(sampled) is None
    failed = merge.productions([{**_report(NONE, 1000, 10, 0, 10**9), "failed": 1}])
    assert merge.problem(failed) == "1 messages failed"


def test_table_rows_by_kind_and_line(tmp_path: Path) -> None:
    """The table shows each publishing kind in its own rows and compares like with like; the
    previous peer's line is a column of its own when it ran; a run marked with an error is
    left out of its figures."""

    def run(line: str, kind: str, rate: int, rnd: int, **extra: Any) -> dict[str, Any]:
        return {
            "workload": "1",
            "line": line,
            "kind": kind,
            "round": rnd,
            "produce": {"msgs_per_s": rate, "publish": {"p99_ms": 10.0}},
            **extra,
        }

    runs = [
        run("hedwig", EACH, 400_000, 0),
        run("hedwig", NONE, 1_000_000, 0),
        run("kafka-durable", EACH, 500_000, 0),
        run("kafka-durable", NONE, 500_000, 0),
        run("kafka-4.1.1-durable", EACH, 600_000, 0),
        run("hedwig", EACH, 420_000, 1),
        run("hedwig", NONE, 1_100_000, 1),
        run("kafka-durable", EACH, 300_000, 1, error="3 outcomes read for 5 messages"),
        run("kafka-durable", NONE, 550_000, 1),
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    table = render([path])
    head = table.splitlines()[0]
    assert "Kafka 4.4.0, flush per append" in head and "Kafka 4.1.1, flush per append" in head
    each = next(ln for ln in table.splitlines() if "acknowledged msg/s, an outcome per" in ln)
    none = next(ln for ln in table.splitlines() if "acknowledged msg/s, no outcome per" in ln)
    assert "| 410k (400k-420k) | 500k [1 runs] | 600k [1 runs] | 0.82 | ≥ 1.0 |" in each
    assert "| 1,050k (1,000k-1,100k) | 525k (500k-550k) | - | 2.00 | ≥ 1.0 |" in none


def test_lines_and_rounds_a_run_chooses(tmp_path: Path) -> None:
    """Kafka 4.4.0 is the peer of the default lines; 4.1.1 runs only when asked for, and
    then only on the workloads named; a workload capped at one round runs in the first."""
    default = lines_by_key(None)
    assert [ln.key for ln in default] == ["hedwig", "kafka-durable", "kafka-default"]
    assert {ln.version for ln in default if ln.system == "kafka"} == {fetch.KAFKA_VERSION}
    assert fetch.KAFKA_VERSION == "4.4.0"
    (previous,) = lines_by_key(["kafka-4.1.1-durable"])
    assert previous.version == fetch.PREVIOUS_KAFKA_VERSION == "4.1.1"
    assert previous.producer_config == {"acks": "all", "enable.idempotence": True}
    harness = Harness(
        lines=[*default, previous],
        workloads=list(WORKLOADS),
        rounds=3,
        out=tmp_path / "r.jsonl",
        classpath=None,
        kafka_python_path=None,
        log=sys.stderr,
        only={previous.key: {"1", "7b"}},
    )
    w = {x.key: x for x in WORKLOADS}
    assert harness.runs(previous, w["1"], 2) and not harness.runs(previous, w["2a"], 0)
    assert harness.runs(default[0], w["7c"], 0) and not harness.runs(default[0], w["7c"], 1)
    assert not harness.runs(default[2], w["7c"], 0)  # not on Kafka's default line
    assert harness.runs(default[1], w["4"], 2)
