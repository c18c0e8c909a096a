"""``make demo``: the traffic heat map, end to end, on this machine.

Starts ZooKeeper and three hubs, a vehicle simulator (vehicles driving across a grid of
quadrants, each publishing its position to its quadrant's topic), the Spark streaming job
(``jobs/traffic_heatmap.py`` on local[2], in its own process), and a web page showing the
live heat map and which hub owns each quadrant's topic. Prints exactly one line to stdout,

    DEMO http://127.0.0.1:PORT/

once the page is served, then runs until Ctrl-C (or ``--duration`` seconds). Everything else
(progress, warnings) goes to stderr; data and logs live in a temporary directory that is
removed on exit unless ``--keep``.

The demo, the jobs and the traffic model are applications, not installed packages: run them
from ``spark-apps/``, where their packages are (``make demo`` does),

    cd spark-apps && ../.venv/bin/python -m demo.run_demo [--port 8000] [--move-every 60]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType

from demo.state import DemoState
from demo.watchers import follow_heatmap, move_topics, run_vehicles, watch_cluster
from demo.web import serve
from hedwig.devcluster.cluster import DevCluster
from hedwig_spark.session import prepare_environment
from jobs.traffic_heatmap import HEATMAP_TOPIC
from traffic.grid import Grid

log = logging.getLogger("demo")

WINDOW_S, SLIDE_S = 30, 10

# spark-apps/: the heat-map job runs from there, as ``python -m jobs.traffic_heatmap``.
APPS_DIR = Path(__file__).resolve().parents[1]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--port", type=int, default=0, help="web page port (default: any free one)")
    p.add_argument("--hubs", type=int, default=3)
    p.add_argument("--vehicles", type=int, default=150)
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument(
        "--move-every",
        type=float,
        default=0.0,
        help="restart a hub owning quadrants every this many seconds (0: never)",
    )
    p.add_argument("--data-dir", help="keep cluster data, checkpoint and logs here")
    p.add_argument("--keep", action="store_true", help="do not delete the data directory")
    p.add_argument(
        "--secure",
        action="store_true",
        help="TLS, authentication and ACLs on the hubs (hedwig dev up --secure); the demo,\n"
        "the simulator and Spark connect as the cluster's super-user",
    )
    return p


class Background:
    """The asyncio side (vehicles, watchers) on a loop in its own thread."""

    def __init__(self, cluster: DevCluster, state: DemoState, args: argparse.Namespace) -> None:
        self.cluster, self.state, self.args = cluster, state, args
        self.loop = asyncio.new_event_loop()
        self.stop_event: asyncio.Event | None = None
        self.thread = threading.Thread(target=self._run, name="demo-loop", daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self.thread.start()
        self.ready.wait(10)

    def _run(self) -> None:
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        stop = self.stop_event = asyncio.Event()
        self.ready.set()
        c, s = self.cluster, self.state
        tasks = [
            run_vehicles(c, s, self.args.vehicles, stop),
            follow_heatmap(c, s, HEATMAP_TOPIC, stop),
            watch_cluster(c, s, stop),
        ]
        if self.args.move_every > 0:
            tasks.append(move_topics(c, s, self.args.move_every, stop))
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                log.error("demo task failed: %r", r)

    def stop(self) -> None:
        if self.stop_event is not None:
            self.loop.call_soon_threadsafe(self.stop_event.set)
        self.thread.join(30)


def start_spark(cluster: DevCluster, data: Path, log_file: Path) -> subprocess.Popen[bytes]:
    prepare_environment()
    cmd = [
        sys.executable,
        "-m",
        "jobs.traffic_heatmap",
        "--local",
        "--hubs",
        ",".join(cluster.addresses),
        "--checkpoint",
        str(data / "checkpoint"),
        "--output-dir",
        str(data / "cells"),
        "--trigger-seconds",
        "2",
        "--window",
        f"{WINDOW_S} seconds",
        "--slide",
        f"{SLIDE_S} seconds",
        "--max-records-per-trigger",
        "20000",
    ]
    out = open(log_file, "ab")  # noqa: SIM115 - handed to the child
    try:
        # Its own session: Ctrl-C reaches us, and we stop Spark in order.
        return subprocess.Popen(
            cmd, cwd=APPS_DIR, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    finally:
        out.close()


def stop_spark(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(message)s")
    data = Path(args.data_dir or tempfile.mkdtemp(prefix="hedwig-demo-"))
    data.mkdir(parents=True, exist_ok=True)
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)

    grid = Grid()
    state = DemoState(grid, WINDOW_S * 1000, SLIDE_S * 1000)
    cluster = DevCluster(
        hubs=args.hubs, region="demo", base_dir=str(data / "cluster"), secure=args.secure
    )
    spark: subprocess.Popen[bytes] | None = None
    background: Background | None = None
    code = 0
    try:
        log.info("starting ZooKeeper and %d hubs in %s", args.hubs, data)
        cluster.start()
        # Hubs numbered as 'hedwig dev' and the demo's log number them: by start order, from 0.
        state.hub_order.extend(cluster.addresses)
        if cluster.security is not None:
            # Every client of the demo (and the Spark job it starts) reads HEDWIG_TLS_CA,
            # HEDWIG_CERT and HEDWIG_KEY: they act as the cluster's super-user.
            os.environ.update(cluster.security.client_env())
        background = Background(cluster, state, args)
        background.start()
        log.info("starting the Spark heat-map job (log: %s)", data / "spark.log")
        spark = start_spark(cluster, data, data / "spark.log")
        server = serve(state, args.port)
        port = server.server_address[1]
        print(f"DEMO http://127.0.0.1:{port}/", flush=True)
        started = time.monotonic()
        while not done.wait(1.0):
            if args.duration is not None and time.monotonic() - started >= args.duration:
                break
            if spark.poll() is not None:
                log.error(
                    "the Spark job exited (%s):\n%s", spark.returncode, tail(data / "spark.log")
                )
                code = 1
                break
        server.shutdown()
    finally:
        log.info("stopping")
        if spark is not None:
            stop_spark(spark)
        if background is not None:
            background.stop()
        cluster.stop()
        if not args.keep and not args.data_dir:
            shutil.rmtree(data, ignore_errors=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
