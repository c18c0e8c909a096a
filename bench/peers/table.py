"""The table: medians and spread of every figure, per line, from a results file.

Each row is one figure of one workload (of one publishing kind, for a workload run with both:
an outcome per message, or none; ``workloads.py``); each cell the median over the rounds with
the lowest and highest value beside it; the last columns give Hedwig's median as a ratio of
the durable Kafka line's and the target for that ratio where there is one. A run that failed
(a producer that read fewer outcomes than it published with one counts as failed) or whose
consumers did not receive everything is left out of that figure (the cell says how many runs
it rests on when that is fewer than the rounds).

``write_docs`` replaces what stands between the two markers in ``docs/benchmarks.md``.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers.systems import LINES
from bench.peers.workloads import EACH, NONE, WORKLOADS

BEGIN = "<!-- peers:begin (written by `python -m bench.peers`) -->"
END = "<!-- peers:end -->"

Get = Callable[[dict[str, Any]], float | None]


def _path(*keys: str, needs_complete: bool = False) -> Get:
    def get(result: dict[str, Any]) -> float | None:
        if "error" in result:
            return None
        if needs_complete and not result.get("consume", {}).get("complete"):
            return None
        node: Any = result
        for k in keys:
            if not isinstance(node, dict) or k not in node:
                return None
            node = node[k]
        return float(node) if isinstance(node, int | float) else None

    return get


@dataclass(frozen=True)
class Row:
    workload: str
    figure: str
    get: Get
    throughput: bool  # higher is better (else a latency or a cost: lower is better)
    target: str = ""
    # The publishing kind whose runs it shows (``None``: the workload's only one).
    kind: str | None = None

    def takes(self, result: dict[str, Any]) -> bool:
        if result["workload"] != self.workload:
            return False
        return self.kind is None or result.get("kind", NONE) == self.kind


PUBLISH = {q: _path("produce", "publish", f"{q}_ms") for q in ("p50", "p99", "p999")}
E2E = {q: _path("consume", "e2e", f"{q}_ms", needs_complete=True) for q in ("p50", "p99", "p999")}
NAMES = {"p50": "p50", "p99": "p99", "p999": "p99.9"}
SHORT = {EACH: "an outcome per message", NONE: "no outcome per message"}
SERVER_CPU = _path("server_cpu_pct")


def _latency_rows(w: str, quantiles: tuple[str, ...], targets: bool = True) -> list[Row]:
    rows = []
    for label, gets in (("publish", PUBLISH), ("publish-to-delivery", E2E)):
        for q in quantiles:
            target = "≤ 1.0" if targets and q == "p99" else ""
            rows.append(Row(w, f"{label} {NAMES[q]}, ms", gets[q], False, target))
    return rows


def _saturation_rows(w: str, delivery: bool, cpu: bool) -> list[Row]:
    """A workload as fast as acks come, for both kinds: throughput, the latency under
    saturation, and where asked, the consumers' latency and the servers' CPU."""
    rows = []
    for kind in (EACH, NONE):
        k = SHORT[kind]
        rows += [
            Row(w, f"acknowledged msg/s, {k}", _path("produce", "msgs_per_s"), True, "≥ 1.0", kind),
            Row(
                w, f"publish p99 at saturation (sampled), ms, {k}", PUBLISH["p99"], False, "", kind
            ),
        ]
        if delivery:
            rows.append(Row(w, f"publish-to-delivery p99, ms, {k}", E2E["p99"], False, "", kind))
        if cpu:
            rows += [
                Row(
                    w,
                    f"producer CPU, µs per message, {k}",
                    _path("produce", "client_cpu_us_per_msg"),
                    False,
                    "",
                    kind,
                ),
                Row(w, f"server CPU, % of one core, {k}", SERVER_CPU, False, "", kind),
            ]
    return rows


ROWS: list[Row] = [
    *_saturation_rows("1", delivery=False, cpu=True),
    *_latency_rows("2a", ("p50", "p99", "p999")),
    *_latency_rows("2b", ("p50", "p99")),
    *_latency_rows("3", ("p50", "p99")),
    Row("3", "server CPU, % of one core", SERVER_CPU, False),
    *_latency_rows("7a", ("p50", "p99")),
    Row("7a", "server CPU, % of one core", SERVER_CPU, False),
    *_saturation_rows("7b", delivery=True, cpu=False),
    *_latency_rows("7c", ("p50", "p99")),
    Row(
        "7c",
        "server memory the run added, MB (Hedwig: hub and ZooKeeper)",
        _path("server_rss_added_mb"),
        False,
    ),
    Row("7c", "server RSS after the run, MB", _path("server_rss_mb"), False),
    Row("7c", "server CPU, % of one core", SERVER_CPU, False),
    Row(
        "6",
        "delivered msg/s, all 16 subscribers",
        _path("consume", "delivered_per_s", needs_complete=True),
        True,
        "≥ 1.0",
    ),
    Row(
        "6",
        "consumer CPU, µs per delivered message",
        _path("consume", "client_cpu_us_per_msg", needs_complete=True),
        False,
    ),
    Row(
        "5",
        "catch-up, delivered msg/s",
        _path("consume", "delivered_per_s", needs_complete=True),
        True,
        "≥ 1.0",
    ),
    Row(
        "5",
        "consumer CPU, µs per message",
        _path("consume", "client_cpu_us_per_msg", needs_complete=True),
        False,
    ),
    *_saturation_rows("4", delivery=False, cpu=False),
    *_latency_rows("8a", ("p50", "p99")),
    Row("8a", "server CPU, % of one core", SERVER_CPU, False),
    *_saturation_rows("8b", delivery=True, cpu=False),
]


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """The runs of every file, rounds numbered on from one file to the next."""
    out: list[dict[str, Any]] = []
    for path in paths:
        offset = max((r["round"] for r in out), default=-1) + 1
        for line in path.read_text().splitlines():
            if line.strip():
                result = json.loads(line)
                result["round"] += offset
                out.append(result)
    return out


def _fmt(v: float, throughput: bool) -> str:
    if throughput and v >= 10_000:
        return f"{v / 1000:,.0f}k"
    if v >= 100:
        return f"{v:,.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def _ratio(r: float) -> str:
    """Two decimals, or two significant digits below 0.1 (a latency hundreds of times
    lower is not 0.00)."""
    return f"{r:.2f}" if r >= 0.1 else f"{r:.2g}"


def _cell(values: list[float], throughput: bool, rounds: int) -> str:
    if not values:
        return "-"
    med = statistics.median(values)
    text = _fmt(med, throughput)
    if len(values) > 1:
        text += f" ({_fmt(min(values), throughput)}-{_fmt(max(values), throughput)})"
    if len(values) < rounds:
        text += f" [{len(values)} runs]"
    return text


def render(paths: list[Path], note: str = "") -> str:
    results = load(paths)
    lines = [ln for ln in LINES if any(r["line"] == ln.key for r in results)]
    rounds = max((r["round"] for r in results), default=0) + 1
    titles = {w.key: w.title for w in WORKLOADS}
    caps = {w.key: w.max_rounds for w in WORKLOADS if w.max_rounds}
    head = ["workload", "figure", *(ln.label for ln in lines)]
    compare = any(ln.key == "hedwig" for ln in lines) and any(
        ln.key == "kafka-durable" for ln in lines
    )
    if compare:
        head += ["Hedwig ÷ Kafka durable", "target"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in ROWS:
        per_line = {
            ln.key: [
                v
                for r in results
                if row.takes(r) and r["line"] == ln.key
                for v in [row.get(r)]
                if v is not None
            ]
            for ln in lines
        }
        if not any(per_line.values()):
            continue
        cells = [f"{row.workload}: {titles[row.workload]}", row.figure]
        expected = min(rounds, caps.get(row.workload, rounds))
        cells += [_cell(per_line[ln.key], row.throughput, expected) for ln in lines]
        if compare:
            h, k = per_line["hedwig"], per_line["kafka-durable"]
            ratio = (
                statistics.median(h) / statistics.median(k)
                if h and k and statistics.median(k)
                else None
            )
            cells.append(_ratio(ratio) if ratio is not None else "-")
            cells.append(row.target)
        out.append("| " + " | ".join(cells) + " |")
    names = ", ".join(f"`{p.name}`" for p in paths)
    footer = f"\nMedian (lowest-highest) of {rounds} rounds; results {names}."
    if note:
        footer += f" {note}"
    return "\n".join(out) + "\n" + footer + "\n"


def write_docs(docs: Path, table: str) -> None:
    text = docs.read_text()
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        _, after = rest.split(END, 1)
        docs.write_text(f"{before}{BEGIN}\n{table}{END}{after}")
    else:
        docs.write_text(f"{text.rstrip()}\n\n## Side by side with Kafka\n\n{BEGIN}\n{table}{END}\n")
