"""Where the time goes per message on each Hedwig path, sampled with py-spy.

    python -m bench.peers.profile                      # every path, markdown on stdout
    python -m bench.peers.profile publish --keep DIR   # one path, keep the raw stacks
    python -m bench.peers.profile publish --kind each --window 16000   # another kind, window
    python -m bench.peers.profile topics --wall        # every thread's wall clock, idle too

A one-hub cluster runs a workload of the peer benchmark while py-spy samples the hub and the
driver process (Python frames, 250 per second, without pausing them, only while a thread holds
the interpreter lock: a thread blocked in ``fdatasync`` or a socket is not counted). A sample
whose innermost frame runs the event loop is uvloop's own work (it is C); the others are
charged to the innermost frame that belongs to Hedwig, by module (so the time ``struct`` or
``bytes.join`` spends on behalf of the codec counts as codec), else to the ZooKeeper client,
the benchmark driver or the rest. The processes' CPU time divided by the messages gives the
cost per message, and each share of the samples a share of that cost (an estimate: CPU spent
outside the interpreter lock, in system calls, is spread over the shares).

Where the time a message waits goes, which a CPU profile cannot show, comes from the hub's own
metrics read before and after the measured part (``hub_account``): publish requests answered
and the group commit's syncs (so messages a request and requests a sync), the hub's publish
latency from a request's arrival to its durable acknowledgement (its histogram's buckets), and
the cycle collector's pauses. A message's publish latency less the hub's is the time it spent
in the client (queued, in a batch not yet cut or not yet sent) and on the wire.

Paths:
- ``publish``: workload 1 (as fast as acknowledgements come): the client's publish path and
  the hub's receive and storage path.
- ``topics``: workload 3 (100 topics at a fixed rate): small batches, many topics.
- ``catchup``: workload 5 (a backlog read from the start): the hub's delivery from storage and
  the client's receive path.
- ``fanout``: workload 6 (16 subscribers, live): delivery to many subscribers.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench.peers import fetch, merge
from bench.peers.measure import cpu_seconds
from bench.peers.rounds import ROOT
from bench.peers.systems import RunningHedwig
from bench.peers.workloads import EACH, NONE, Workload, by_key, to_json

PATHS: dict[str, str] = {"publish": "1", "topics": "3", "catchup": "5", "fanout": "6"}
RATE = 250

# Innermost frame's file -> the stage it stands for (first match wins).
STAGES: list[tuple[str, str]] = [
    ("hedwig/protocol/", "codec (hedwig.protocol)"),
    ("hedwig/ledger/storage", "storage (ledger.storage)"),
    ("hedwig/ledger/", "ledger (handle, topic log, reader)"),
    ("hedwig/hub/", "hub (server, requests, topic, subscription)"),
    ("hedwig/client/", "client (publisher, subscriber, routing)"),
    ("hedwig/net/", "connection (hedwig.net)"),
    ("hedwig/metadata/zookeeper/client/", "ZooKeeper client (hedwig.metadata.zookeeper.client)"),
    ("hedwig/", "other Hedwig"),
    ("bench/peers/", "benchmark driver"),
]
EVENT_LOOP = ("asyncio/runners.py", "selectors.py", "uvloop")


@dataclass
class Sampled:
    """One process's samples and CPU time over one run."""

    name: str
    stacks: dict[str, int]
    cpu_s: float

    @property
    def total(self) -> int:
        return sum(self.stacks.values())


def stage_of(frames: list[str]) -> str:
    leaf = frames[-1] if frames else ""
    # uvloop is C: its own work (epoll, sockets, callbacks' scheduling) shows as the Python
    # frame that runs the loop.
    if any(m in leaf for m in EVENT_LOOP):
        return "event loop (uvloop, sockets)"
    for frame in reversed(frames):
        for marker, stage in STAGES:
            if marker in frame:
                return stage
    return "other (interpreter, stdlib)"


def load_raw(path: Path) -> dict[str, int]:
    stacks: dict[str, int] = collections.Counter()
    if not path.exists():
        return stacks
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks[stack] += int(count)
    return stacks


def _short(frame: str) -> str:
    """``func (/path/to/src/hedwig/x/y.py)`` -> ``hedwig/x/y.py:func``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("/hedwig/", "/bench/", "/python3.11/", "/site-packages/"):
        if marker in where:
            where = marker.strip("/") + "/" + where.split(marker, 1)[1]
            break
    return f"{where}:{name}"


def _leaf(frames: list[str]) -> str:
    """The innermost frame; generated code (dataclass ``__init__``, named tuple ``__new__``)
    is named with its caller, which says what it makes."""
    leaf = _short(frames[-1])
    if leaf.startswith("<") and len(frames) > 1:
        return f"{_short(frames[-2])} → {leaf}"
    return leaf


def wall_report(sampled: Sampled, top: int = 6) -> str:
    """Per thread, the share of its wall-clock samples in each innermost frame."""
    threads: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    for stack, n in sampled.stacks.items():
        thread, _, rest = stack.partition(";")
        if rest:
            threads[thread][_leaf(rest.split(";"))] += n
    out = [f"**{sampled.name}, wall clock** (every thread at every tick)", ""]
    for thread, leaves in sorted(threads.items(), key=lambda kv: -sum(kv[1].values())):
        total = sum(leaves.values())
        parts = ", ".join(
            f"`{leaf}` {100 * n / total:.0f} %" for leaf, n in leaves.most_common(top)
        )
        out.append(f"- {thread} ({total:,} samples): {parts}")
    return "\n".join(out) + "\n"


def report(sampled: Sampled, messages: int, top: int = 12) -> str:
    total = sampled.total or 1
    per_msg_us = sampled.cpu_s / messages * 1e6 if messages else 0.0
    by_stage: dict[str, int] = collections.Counter()
    by_leaf: dict[str, int] = collections.Counter()
    for stack, n in sampled.stacks.items():
        frames = stack.split(";")
        by_stage[stage_of(frames)] += n
        by_leaf[_leaf(frames)] += n
    out = [
        f"**{sampled.name}**: {sampled.cpu_s:.2f} s CPU for {messages:,} messages = "
        f"**{per_msg_us:.2f} µs per message** ({total:,} samples)",
        "",
        "| stage (innermost Hedwig frame) | share | µs/msg |",
        "|---|---|---|",
    ]
    for stage, n in sorted(by_stage.items(), key=lambda kv: -kv[1]):
        out.append(f"| {stage} | {100 * n / total:.1f} % | {per_msg_us * n / total:.2f} |")
    out += ["", "| function (self time) | share |", "|---|---|"]
    for leaf, n in sorted(by_leaf.items(), key=lambda kv: -kv[1])[:top]:
        out.append(f"| `{leaf}` | {100 * n / total:.1f} % |")
    return "\n".join(out) + "\n"


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _bucket_quantile(buckets: list[tuple[float, float]], q: float) -> float:
    """The upper bound of the histogram bucket holding quantile ``q`` (cumulative counts)."""
    total = buckets[-1][1] if buckets else 0.0
    for bound, count in buckets:
        if total and count >= q * total:
            return bound
    return float("nan")


def hub_account(
    before: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    after: dict[tuple[str, tuple[tuple[str, str], ...]], float],
    messages: int,
) -> str:
    def delta(name: str, **labels: str) -> float:
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0.0) - before.get(key, 0.0)

    # Every publish request answered is one sample of the hub's publish latency.
    publishes = delta("hedwig_publish_latency_seconds_count")
    syncs = delta("hedwig_storage_syncs_total")
    buckets = sorted(
        (float(dict(k[1])["le"]), v - before.get(k, 0.0))
        for k, v in after.items()
        if k[0] == "hedwig_publish_latency_seconds_bucket"
    )
    gcs = {
        dict(k[1])["generation"]: (v - before.get(k, 0.0))
        for k, v in after.items()
        if k[0] == "hedwig_gc_pause_seconds_count"
    }
    gc_s = {
        dict(k[1])["generation"]: (v - before.get(k, 0.0))
        for k, v in after.items()
        if k[0] == "hedwig_gc_pause_seconds_sum"
    }
    p50, p99 = (_bucket_quantile(buckets, q) * 1000 for q in (0.5, 0.99))
    lat_sum = delta("hedwig_publish_latency_seconds_sum")
    pauses = ", ".join(
        f"gen {g}: {gcs[g]:.0f} ({gc_s.get(g, 0.0) * 1000:.0f} ms)" for g in sorted(gcs)
    )
    return (
        f"**hub account**: {publishes:,.0f} publish requests ({messages / max(1, publishes):,.1f}"
        f" messages each), {syncs:,.0f} syncs ({publishes / max(1, syncs):,.1f} requests and"
        f" {messages / max(1, syncs):,.1f} messages a sync); hub publish latency (arrival to"
        f" durable ack) mean {lat_sum / max(1, publishes) * 1000:.2f} ms, p50 ≤ {p50:g} ms, p99 ≤"
        f" {p99:g} ms (bucket bounds); collector pauses {pauses or 'none'}\n"
    )


class Sampler:
    """py-spy attached to a running process until stopped; its CPU time is read meanwhile
    (the last reading before the process ends)."""

    def __init__(self, py_spy: Path, pid: int, out: Path, name: str, wall: bool = False) -> None:
        self.name, self.pid, self.out = name, pid, out
        # Only samples holding the interpreter lock: Python's own work, not a thread blocked
        # in fdatasync or a socket; or, with ``wall``, every thread at every tick, idle or not,
        # each stack under its thread, to see where the time goes while nothing computes.
        which = ["--idle", "--threads"] if wall else ["--gil"]
        self.proc = subprocess.Popen(
            [
                str(py_spy),
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--nolineno",
                "--nonblocking",
                *which,
                "--rate",
                str(RATE),
                "-o",
                str(out),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.cpu0 = cpu_seconds(pid)
        self.cpu = self.cpu0
        self._stop = threading.Event()
        self._poll = threading.Thread(target=self._watch, daemon=True)
        self._poll.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.cpu = cpu_seconds(self.pid)
            except OSError:
                return

    def stop(self) -> Sampled:
        self._stop.set()
        self._poll.join()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return Sampled(self.name, load_raw(self.out), self.cpu - self.cpu0)


def _driver(role: str, bootstrap: list[str], spec: dict[str, object]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "bench.peers.driver",
            "hedwig",
            role,
            ",".join(bootstrap),
            json.dumps(spec),
        ],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )


def _done(proc: subprocess.Popen[str]) -> None:
    """Tell a consumer the producer is done (its time budget runs from then)."""
    assert proc.stdin is not None
    proc.stdin.write("done\n")
    proc.stdin.flush()


def _wait(proc: subprocess.Popen[str], event: str) -> dict[str, object]:
    assert proc.stdout is not None
    for raw in proc.stdout:
        got: dict[str, object] = json.loads(raw)
        if got.get("event") == event:
            return got
    raise RuntimeError(f"driver exited before {event!r}")


def profile_path(
    path: str,
    py_spy: Path,
    keep: Path,
    kind: str | None = None,
    window: int | None = None,
    wall: bool = False,
) -> str:
    w: Workload = by_key([PATHS[path]])[0]
    running = RunningHedwig(1)
    try:
        hub_pid = running.server_pids[0]
        run_id = f"prof{int(time.time())}"
        produce = w.produce_spec(run_id, kind if kind in w.kinds else None)
        if window:
            produce = replace(produce, window=window)
        consume = w.consume_spec(run_id)
        samplers: list[Sampler] = []
        consumer = None
        if consume is not None and not w.backlog:
            consumer = _driver("consume", running.bootstrap, to_json(consume))
            _wait(consumer, "ready")
        producer = _driver("produce", running.bootstrap, to_json(produce))
        metrics_url = running.cluster.hub_procs[0].metrics_url
        if path in ("publish", "topics"):
            _wait(producer, "measuring")
            before = _scrape(metrics_url)
            samplers.append(Sampler(py_spy, hub_pid, keep / f"{path}-hub.txt", "hub", wall))
            samplers.append(
                Sampler(
                    py_spy, producer.pid, keep / f"{path}-client.txt", "client (producer)", wall
                )
            )
        if path == "fanout":
            samplers.append(Sampler(py_spy, hub_pid, keep / "fanout-hub.txt", "hub"))
            assert consumer is not None
            samplers.append(
                Sampler(py_spy, consumer.pid, keep / "fanout-client.txt", "client (16 subscribers)")
            )
        published = merge.productions([_wait(producer, "result")])
        account = ""
        if path in ("publish", "topics"):
            account = hub_account(before, _scrape(metrics_url), produce.measured)
        producer.wait()
        if w.backlog:
            consumer = _driver("consume", running.bootstrap, to_json(consume))  # type: ignore[arg-type]
            _wait(consumer, "ready")
            samplers.append(Sampler(py_spy, hub_pid, keep / "catchup-hub.txt", "hub"))
            samplers.append(
                Sampler(py_spy, consumer.pid, keep / "catchup-client.txt", "client (consumer)")
            )
        result: dict[str, Any] = {}
        if consumer is not None:
            _done(consumer)
            result = merge.deliveries([_wait(consumer, "result")])
            consumer.wait()
        sampled = [s.stop() for s in samplers]
    finally:
        running.stop()
    if path == "publish":
        messages = produce.messages
    elif path == "topics":
        messages = produce.total - produce.warmup
    else:
        messages = produce.total * max(1, w.subscribers)
    text = [f"### {path}: workload {w.key}, {w.title}, {produce.kind}", ""]
    if published:
        p = published.get("publish", {})
        text += [
            f"Published {published.get('msgs_per_s') or published.get('achieved_rate')} msg/s;"
            f" publish p50 {p.get('p50_ms')} ms, p99 {p.get('p99_ms')} ms"
            f" (window {produce.window:,} messages).",
            "",
        ]
    if result:
        text += [
            f"Delivered {result.get('received')} at {result.get('delivered_per_s')} msg/s.",
            "",
        ]
    if account:
        text.append(account)
    for s in sampled:
        text.append(wall_report(s) if wall else report(s, messages))
    return "\n".join(text)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.peers.profile")
    p.add_argument("paths", nargs="*", help=f"of {sorted(PATHS)} (default: all)")
    p.add_argument("--keep", type=Path, help="keep py-spy's raw stacks in this directory")
    p.add_argument("--kind", choices=[EACH, NONE], help="publishing kind (default: the first)")
    p.add_argument("--window", type=int, help="Hedwig's window of unacknowledged messages")
    p.add_argument(
        "--wall", action="store_true", help="sample every thread, idle or not (publish, topics)"
    )
    args = p.parse_args()
    unknown = [x for x in args.paths if x not in PATHS]
    if unknown:
        p.error(f"unknown paths {unknown}")
    tools = fetch.fetch()
    py_spy = tools.python_path / "bin" / "py-spy"
    with tempfile.TemporaryDirectory(prefix="peers-profile-") as tmp:
        keep = args.keep or Path(tmp)
        keep.mkdir(parents=True, exist_ok=True)
        for path in args.paths or list(PATHS):
            print(profile_path(path, py_spy, keep, args.kind, args.window, args.wall), flush=True)


if __name__ == "__main__":
    main()
