"""Rounds: every line runs every workload, the systems alternating round by round.

In round ``r`` the lines take turns in an order rotated by ``r`` (so no system always runs
first, on a cooler or warmer machine). Each turn starts the system fresh (one node), runs the
single-node workloads one after another on fresh topics, each once for every publishing kind
it has (``workloads.py``), and stops it; then the three-node workloads the same way. Every run
is one JSON line in the results file, as it finishes, so a long run that is interrupted keeps
what it measured.

For each run: the consumers (if the workload has them, and it is not a backlog read) start
first and report ``ready``; then the producers. Several producers report ``warm`` after their
warm-up and wait, and are told to go together (a line on their standard input), so their
measured parts overlap. The servers' CPU time is sampled when every producer has reported
``measuring`` and when every one has reported its result; the servers' resident memory before
the run and then.
A backlog's consumer starts after the producer is done. A consumer's time budget runs from
when the producers are done (it is told so on its standard input). The processes' reports
are made one result by ``merge.py``.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from bench.peers import merge
from bench.peers.measure import cpu_seconds, rss_mb
from bench.peers.systems import Line, Running, start
from bench.peers.workloads import ConsumeSpec, Workload, to_json

ROOT = Path(__file__).resolve().parents[2]


class Driver:
    """A driver process (``bench/peers/driver.py``) and the JSON events it prints."""

    def __init__(self, argv: list[str], env: dict[str, str], log: TextIO, spec: str) -> None:
        self.spec = spec
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=log,
            stdin=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self.events: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                self.events.put(json.loads(raw))
            except json.JSONDecodeError:
                continue
        self.events.put(None)

    def wait(self, event: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                got = self.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"no {event!r} from the driver in {timeout}s") from None
            if got is None:
                raise RuntimeError(f"driver exited ({self.proc.wait()}) before {event!r}")
            if got.get("event") == event:
                return got

    def go(self) -> None:
        """Release a producer waiting at the barrier after its warm-up; tell a consumer the
        producers are done (its budget runs from then)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError):
            os.unlink(self.spec)


def _results(drivers: list[Driver], timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    out = []
    for d in drivers:
        got = d.wait("result", max(1.0, deadline - time.monotonic()))
        got.pop("event")
        out.append(got)
    return out


@dataclass
class Harness:
    """``classpath`` is the peer's jars (``fetch.KAFKA_VERSION``), ``classpaths`` any other
    fetched Kafka versions' by version."""

    lines: list[Line]
    workloads: list[Workload]
    rounds: int
    out: Path
    classpath: str | None
    kafka_python_path: str | None
    log: TextIO
    classpaths: dict[str, str] = field(default_factory=dict)
    # Lines that run only some workloads (by key), as the previous peer's may.
    only: dict[str, set[str]] = field(default_factory=dict)

    def _classpaths(self) -> dict[str, str]:
        from bench.peers.fetch import KAFKA_VERSION

        own = {KAFKA_VERSION: self.classpath} if self.classpath else {}
        return {**self.classpaths, **own}

    def driver(self, line: Line, role: str, running: Running, spec: dict[str, Any]) -> Driver:
        env = dict(os.environ)
        paths = [str(ROOT)]
        # Kept after it: ``bench.before_after`` puts the code under test there.
        if os.environ.get("PYTHONPATH"):
            paths.append(os.environ["PYTHONPATH"])
        if line.system == "kafka" and self.kafka_python_path:
            paths.append(self.kafka_python_path)
        env["PYTHONPATH"] = os.pathsep.join(paths)
        fd, spec_path = tempfile.mkstemp(prefix="peers-spec-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(spec, f)
        argv = [
            sys.executable,
            "-m",
            "bench.peers.driver",
            line.system,
            role,
            ",".join(running.bootstrap),
            f"@{spec_path}",
            json.dumps(line.producer_config),
        ]
        return Driver(argv, env, self.log, spec_path)

    def run_one(
        self, line: Line, running: Running, workload: Workload, run_id: str, kind: str
    ) -> dict[str, Any]:
        produce = workload.produce_specs(run_id, kind)
        consume = workload.consume_specs(run_id)
        result: dict[str, Any] = {"workload": workload.key, "line": line.key, "kind": kind}
        consumers: list[Driver] = []
        producers: list[Driver] = []

        def start_consumers() -> None:
            consumers.extend(self.driver(line, "consume", running, to_json(c)) for c in consume)
            for c in consumers:
                c.wait("ready", 300)

        try:
            rss0 = sum(rss_mb(p) for p in running.memory_pids)
            if consume and not workload.backlog:
                start_consumers()
            producers = [self.driver(line, "produce", running, to_json(p)) for p in produce]
            if len(producers) > 1:
                for p in producers:
                    p.wait("warm", 300)
                for p in producers:
                    p.go()
            for p in producers:
                p.wait("measuring", 300)
            pids = running.server_pids
            cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
            reports = _results(producers, 600)
            cpu1, t1 = sum(cpu_seconds(p) for p in pids), time.monotonic()
            result["produce"] = merge.productions(reports)
            result["server_cpu_pct"] = round(100 * (cpu1 - cpu0) / (t1 - t0), 1)
            rss1 = sum(rss_mb(p) for p in running.memory_pids)
            result["server_rss_mb"] = round(rss1, 1)
            # What the run added (its topics, their subscriptions and messages): the servers
            # are not restarted between a turn's runs, so the total carries the earlier ones.
            result["server_rss_added_mb"] = round(rss1 - rss0, 1)
            if consume:
                if not consumers:
                    start_consumers()
                for c in consumers:
                    c.go()
                result["consume"] = merge.deliveries(_results(consumers, _longest(consume) + 120))
            bad = merge.problem(result["produce"])
            if bad:
                result["error"] = bad
        except (TimeoutError, RuntimeError) as exc:
            result["error"] = str(exc)
        finally:
            for d in (*producers, *consumers):
                d.close()
        return result

    def turn(self, r: int, line: Line, nodes: int, workloads: list[Workload]) -> None:
        print(f"round {r + 1}: {line.key}, {nodes} node(s)", file=sys.stderr, flush=True)
        try:
            running = start(line, nodes, self._classpaths())
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            for w in workloads:
                self._record({"workload": w.key, "line": line.key, "error": f"start: {exc}"}, r)
            return
        try:
            for w in workloads:
                if not self.runs(line, w, r):
                    continue
                for kind in w.kinds:
                    run_id = f"{r}{line.key[:1]}{w.key}{int(time.time() * 1000) % 10**8}"
                    load = os.getloadavg()[0]
                    result = self.run_one(line, running, w, run_id, kind)
                    result.update(nodes=nodes, load_before=round(load, 2))
                    self._record(result, r)
                    time.sleep(0.5)
        finally:
            running.stop()

    def runs(self, line: Line, w: Workload, r: int) -> bool:
        """Whether ``line`` runs ``w`` in round ``r``."""
        if w.max_rounds and r >= w.max_rounds:
            return False
        if w.lines and line.key not in w.lines:
            return False
        return line.key not in self.only or w.key in self.only[line.key]

    def _record(self, result: dict[str, Any], r: int) -> None:
        """One JSON line per run, with the round, the time and the machine's load average
        (1 minute) before the run, which says how quiet the machine was."""
        result.update(round=r, time=time.time())
        with self.out.open("a") as f:
            f.write(json.dumps(result) + "\n")
        print(f"  {_summary(result)}", file=sys.stderr, flush=True)

    def run(self) -> None:
        by_nodes: dict[int, list[Workload]] = {}
        for w in self.workloads:
            by_nodes.setdefault(w.nodes, []).append(w)
        for r in range(self.rounds):
            k = r % len(self.lines)
            order = self.lines[k:] + self.lines[:k]
            for nodes in sorted(by_nodes):
                for line in order:
                    if any(self.runs(line, w, r) for w in by_nodes[nodes]):
                        self.turn(r, line, nodes, by_nodes[nodes])


def _longest(consume: list[ConsumeSpec]) -> float:
    return max(c.timeout_s for c in consume)


def _summary(result: dict[str, Any]) -> str:
    parts = [f"workload {result['workload']} {result['line']} {result.get('kind', '')}"]
    p = result.get("produce", {})
    if "msgs_per_s" in p:
        parts.append(f"{p['msgs_per_s']:,} msg/s")
    if "publish" in p and "p99_ms" in p["publish"]:
        parts.append(f"publish p99 {p['publish']['p99_ms']} ms")
    c = result.get("consume", {})
    if c:
        parts.append(f"delivered {c['received']:,}/{c['expected']:,} {c['delivered_per_s']:,}/s")
        if c["e2e"].get("p99_ms") is not None:
            parts.append(f"e2e p99 {c['e2e']['p99_ms']} ms")
    if "server_cpu_pct" in result:
        parts.append(f"server CPU {result['server_cpu_pct']} %")
    if "server_rss_mb" in result:
        parts.append(f"server RSS {result['server_rss_mb']} MB")
    if "error" in result:
        parts.append(f"ERROR {result['error']}")
    return ", ".join(parts)
