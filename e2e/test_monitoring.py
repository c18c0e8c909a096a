"""The chart's alerts and the dashboard's queries against real hubs scraped by a real
Prometheus (Debian's prometheus 2.42).

Three hub processes (replication 3/3/2, self-balancing off, audits every second) serve a
publish/subscribe load on six topics. Prometheus scrapes them every second as the chart's
ServiceMonitor would label them (job="hedwig-hub", namespace, pool, pod) and evaluates the
alert rules rendered from the chart. The test then walks the hubs through what the alerts are
about, and checks that every alert expression returns data, and that Prometheus's own rule
evaluation makes the alert pending or firing:

1. all load topics moved to hub 0 (graceful hand-offs: moves by reason, time without owner;
   an imbalanced pool: HedwigHubImbalance), and a topic of hub 2 taken from it by deleting
   its owner record, as the operator's forced move does (a loss by reason);
2. a topic left on hub 1 without clients, and hub 1 killed: HedwigTopicWithoutOwner,
   HedwigHubDown, HedwigLedgersUnderReplicated (no spare hub for its replicas);
3. with the load still flowing, every dashboard query returns data;
4. hub 2, owning a topic, frozen past its ZooKeeper session: on waking it drops the topic
   (HedwigZooKeeperSessionLost). Done last: with hub 1 dead, hub 0 cannot reach its ack
   quorum while hub 2 sleeps, so publishing stops;
5. ZooKeeper stopped: HedwigZooKeeperDisconnected.

The pool autoscaler's two alerts read the operator's metrics; promtool runs them
(tests/chart/test_monitoring.py).

Finally the dashboard is drawn from the same queries over the whole run (monitoring/render.py);
with HEDWIG_DASHBOARD_PICTURE=PATH (``make dashboard-picture``) the picture is kept there.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import os
import shutil
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

import dashboards
import render
from controlplane import cluster
from hedwig.client import HedwigClient
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.zookeeper import free_port
from hedwig.metadata import open_store
from hedwig_e2e import ROOT, topic_owner, wait_for

if importlib.util.find_spec("pytest_timeout") is not None:
    pytestmark = pytest.mark.timeout(400)

NAMESPACE = "hedwig"
POOL = "demo"
TOPICS = [f"load-{i}" for i in range(6)]
RATE_PER_TOPIC = 25.0  # messages/s
VARIABLES = render.Variables(namespace=NAMESPACE, pool=POOL, rate_interval="5s")


def pod(i: int) -> str:
    return f"{POOL}-{i}"


def chart_rules(tmp: Path) -> Path:
    """The chart's PrometheusRule (default values) as a Prometheus rules file."""
    try:
        helm = cluster.bin_dir(build=False) / "helm"
    except cluster.ControlPlaneError as exc:
        if os.environ.get("CI"):
            raise
        pytest.skip(f"helm: {exc}")
    out = subprocess.run(
        [
            helm,
            "template",
            "hedwig",
            ROOT / "charts" / "hedwig",
            "--set",
            "metrics.prometheusRule.enabled=true",
            "--show-only",
            "templates/monitoring/prometheusrule.yaml",
        ],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "HELM_CACHE_HOME": str(tmp / "helm")},
    ).stdout
    rule = yaml.safe_load(out)
    path = tmp / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


class Prometheus:
    def __init__(self, workdir: Path, targets: list[tuple[str, dict[str, str]]], rules: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = {
            "global": {
                "scrape_interval": "1s",
                "scrape_timeout": "900ms",
                "evaluation_interval": "1s",
            },
            "rule_files": [str(rules)],
            "scrape_configs": [
                {
                    "job_name": "hedwig-hub",
                    "static_configs": [
                        {"targets": [address], "labels": labels} for address, labels in targets
                    ],
                }
            ],
        }
        self.config = workdir / "prometheus.yml"
        self.config.write_text(yaml.safe_dump(config))
        self.log = workdir / "prometheus.log"
        binary = shutil.which("prometheus")
        if binary is None:
            if os.environ.get("CI"):
                raise AssertionError("prometheus is not installed (make test installs it)")
            pytest.skip("prometheus is not installed (apt-get install prometheus)")
        check = subprocess.run(
            [shutil.which("promtool") or "promtool", "check", "config", self.config],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0, check.stdout + check.stderr
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    binary,
                    f"--config.file={self.config}",
                    f"--storage.tsdb.path={workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--storage.tsdb.retention.time=2h",
                    "--log.level=warn",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_for("Prometheus ready", self._ready, 60)

    def _ready(self) -> bool:
        assert self.proc.poll() is None, self.log.read_text()[-3000:]
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        data = render.prometheus_get(self.url, "/api/v1/query", {"query": expr})
        assert isinstance(data, dict)
        return list(data["result"])

    def data(self, what: str, expr: str, timeout: float = 60.0) -> list[dict[str, Any]]:
        """Wait until ``expr`` returns data."""
        return wait_for(f"{what}: {expr}", lambda: self.query(expr), timeout, interval=0.5)

    def alert_seen(self, name: str, timeout: float = 30.0) -> str:
        """Wait until Prometheus's own evaluation has the alert pending or firing."""
        result = wait_for(
            f"alert {name} pending or firing",
            lambda: self.query(f'ALERTS{{alertname="{name}"}}'),
            timeout,
            interval=0.5,
        )
        return str(result[0]["metric"]["alertstate"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@dataclass
class Load:
    """Publishers and subscribers on the topics, in a thread with its own event loop; one
    subscriber ("lagging") that never consumes, so backlog shows."""

    hubs: list[str]
    topics: list[str]
    rate: float
    published: int = 0
    errors: list[str] = field(default_factory=list)
    stop_event: threading.Event = field(default_factory=threading.Event)
    ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Load:
        self.thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)
        self.thread.start()
        assert self.ready.wait(60), self.errors
        return self

    async def _run(self) -> None:
        async with HedwigClient(self.hubs) as client:
            subs = [await client.subscribe(t, "reader") for t in self.topics]
            await client.subscribe(self.topics[0], "lagging")
            self.ready.set()
            tasks = [asyncio.create_task(self._publish(client, t)) for t in self.topics]
            tasks += [asyncio.create_task(self._read(s)) for s in subs]
            while not self.stop_event.is_set():  # noqa: ASYNC110 - set from another thread
                await asyncio.sleep(0.1)  # a look at a flag of another thread, not a wait
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _publish(self, client: HedwigClient, topic: str) -> None:
        payload = b"x" * 200
        while True:
            try:
                await client.publish(topic, payload)
                self.published += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.errors.append(f"{topic}: {exc!r}")
            await asyncio.sleep(1 / self.rate)  # the test: the publishing rate

    async def _read(self, sub: Any) -> None:
        while True:
            try:
                msg = await sub.next(timeout=5)
                sub.consume(msg)
            except asyncio.CancelledError:
                raise
            except Exception:
                continue

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(60)


def move(hubs: list[str], topic: str, to: str) -> None:
    async def go() -> None:
        async with HedwigClient(hubs) as client:
            await client.move_topic(topic, to, reason="moved by the monitoring test")

    asyncio.run(go())


def force_release(zk: str, topic: str) -> None:
    """Delete the topic's owner record, as the operator's forced move does."""

    async def go() -> None:
        store = open_store(zk, region=POOL)
        await store.start()
        try:
            got = await store.ownership.read_owner_info(topic)
            assert got is not None
            await store.ownership.delete_owner_info(topic, got.version)
        finally:
            await store.close()

    asyncio.run(go())


@pytest.fixture
def bed(tmp_path: Path) -> Iterator[tuple[DevCluster, Prometheus]]:
    rules = chart_rules(tmp_path)
    with DevCluster(
        hubs=3,
        region=POOL,
        session_timeout_s=4.0,
        base_dir=str(tmp_path / "cluster"),
        hub_args=[
            "--no-self-balance",
            "--audit-interval",
            "1",
            "--load-report-interval",
            "1",
            "--placement",
            "least-loaded",
            "--log-level",
            "info",
        ],
    ) as dev:
        targets = [
            (f"127.0.0.1:{h.metrics_port}", {"namespace": NAMESPACE, "pool": POOL, "pod": pod(i)})
            for i, h in enumerate(dev.hub_procs)
        ]
        prometheus = Prometheus(tmp_path, targets, rules)
        try:
            yield dev, prometheus
        finally:
            prometheus.stop()
            # No hand-offs on the way out: ZooKeeper may be gone, SIGTERM would wait for it.
            for h in dev.hub_procs:
                h.thaw()
                h.kill()


def test_alerts_and_dashboard_queries_on_real_hubs(
    bed: tuple[DevCluster, Prometheus], tmp_path: Path
) -> None:
    dev, prom = bed
    hubs = dev.addresses
    rules = {
        r["alert"]: r
        for g in yaml.safe_load((tmp_path / "rules.yaml").read_text())["groups"]
        for r in g["rules"]
    }
    loaded = render.prometheus_get(prom.url, "/api/v1/rules", {})
    assert isinstance(loaded, dict)
    assert sorted(r["name"] for g in loaded["groups"] for r in g["rules"]) == sorted(rules)
    events: list[tuple[float, str]] = []
    start = time.time()
    load = Load(hubs, TOPICS, RATE_PER_TOPIC).start()
    prom.data("all three hubs scraped", 'count(up{job="hedwig-hub"} == 1) == 3')
    prom.data("traffic", f'sum(rate(hedwig_messages_in_total{{pool="{POOL}"}}[5s])) > 50')
    time.sleep(4)

    # 1. Every load topic to hub 0.
    events.append((time.time(), "topics moved to demo-0"))
    for topic in TOPICS:
        owner = topic_owner(dev.zk, POOL, topic)
        if owner is not None and owner.address != hubs[0]:
            move(hubs, topic, hubs[0])
    # "orphan" on hub 1; "taken" and "sleeper" on hub 2; each with a publisher of its own.
    side = {}
    for i, topic in ((1, "orphan"), (2, "taken"), (2, "sleeper")):
        side[topic] = Load([hubs[i]], [topic], RATE_PER_TOPIC).start()
        owner = topic_owner(dev.zk, POOL, topic)
        assert owner is not None
        if owner.address != hubs[i]:
            move(hubs, topic, hubs[i])
        wait_for(
            f"{topic} on hub {i}",
            lambda t=topic, i=i: (
                (o := topic_owner(dev.zk, POOL, t)) is not None and o.address == hubs[i]
            ),
            30,
        )
    wait_for(
        "all load topics on hub 0",
        lambda: all(
            (o := topic_owner(dev.zk, POOL, t)) is not None and o.address == hubs[0] for t in TOPICS
        ),
        30,
    )
    prom.data("moves by reason", f'hedwig_topic_releases_total{{pod=~"{pod(1)}|{pod(2)}"}} > 0')
    prom.data("imbalance", rules["HedwigHubImbalance"]["expr"], 60)
    prom.alert_seen("HedwigHubImbalance")
    events.append((time.time(), "owner record of a demo-2 topic deleted"))
    force_release(dev.zk, "taken")
    prom.data("a loss by reason", f'hedwig_topic_losses_total{{pod="{pod(2)}"}} > 0', 30)
    side["taken"].stop()

    # 2. The orphan's publisher stops and its owner, hub 1, dies (once hub 1 has reported
    # the orphan's traffic: a rate needs a few load reports).
    prom.data(
        "the orphan's traffic on hub 1",
        f'hedwig_topic_rate{{topic="orphan", pod="{pod(1)}", unit="messages", direction="in"}} > 1',
        30,
    )
    side["orphan"].stop()
    events.append((time.time(), "demo-1 killed"))
    dev.hub_procs[1].kill()
    expr = rules["HedwigTopicWithoutOwner"]["expr"]
    try:
        wait_for(
            "orphan without an owner",
            lambda: "orphan" in {r["metric"]["topic"] for r in prom.query(expr)},
            30,
        )
    except AssertionError as exc:
        # What the rule's parts said, for whoever reads a failure.
        parts = {
            q: prom.query(q)
            for q in (
                'last_over_time(hedwig_topic_rate{topic="orphan", unit="messages"}[10m])',
                "last_over_time(hedwig_topic_rate_floor[10m])",
                'hedwig_topic_rate{topic="orphan"}',
                'up{job="hedwig-hub"}',
            )
        }
        raise AssertionError(f"{exc}; parts of the rule: {parts}") from None
    prom.alert_seen("HedwigTopicWithoutOwner")
    down = prom.data("hub 1 down", rules["HedwigHubDown"]["expr"], 30)
    assert {r["metric"]["pod"] for r in down} == {pod(1)}
    prom.alert_seen("HedwigHubDown")
    under = prom.data("under-replicated ledgers", rules["HedwigLedgersUnderReplicated"]["expr"], 60)
    assert float(under[0]["value"][1]) >= 1
    prom.alert_seen("HedwigLedgersUnderReplicated")
    flowing = f'sum(rate(hedwig_messages_in_total{{pod="{pod(0)}"}}[5s])) > 50'
    prom.data("load still flowing on hub 0", flowing, 60)

    # 3. Every dashboard query returns data now.
    empty = []
    for title, query in dashboards.queries():
        expr = VARIABLES.fill(query.expr)
        try:
            result = prom.data(title, expr, 15)
        except AssertionError:
            empty.append(f"{title}: {expr}")
            continue
        values = [float(r["value"][1]) for r in result]
        assert any(math.isfinite(v) for v in values), f"{title}: only NaN from {expr}"
    assert not empty, "dashboard queries without data:\n" + "\n".join(empty)

    # 4. Hub 2 frozen past its session; on waking it drops "sleeper".
    events.append((time.time(), "demo-2 frozen"))
    dev.hub_procs[2].freeze()
    time.sleep(7)
    events.append((time.time(), "demo-2 thawed"))
    dev.hub_procs[2].thaw()
    lost = prom.data("session loss", rules["HedwigZooKeeperSessionLost"]["expr"], 60)
    assert {r["metric"]["pod"] for r in lost} == {pod(2)}
    assert prom.alert_seen("HedwigZooKeeperSessionLost") == "firing"  # no "for"
    side["sleeper"].stop()

    # 5. ZooKeeper gone: the remaining hubs' sessions are suspended.
    load.stop()
    events.append((time.time(), "ZooKeeper stopped"))
    assert dev.zk_server is not None
    dev.zk_server.stop()
    expr = rules["HedwigZooKeeperDisconnected"]["expr"]
    wait_for(
        "both hubs disconnected",
        lambda: {r["metric"]["pod"] for r in prom.query(expr)} == {pod(0), pod(2)},
        30,
    )
    prom.alert_seen("HedwigZooKeeperDisconnected")
    time.sleep(3)
    end = time.time()

    # Every alert rule was pending or firing at some point, by Prometheus's own evaluation.
    seen = prom.query(f"count by (alertname) (max_over_time(ALERTS[{int(end - start) + 30}s]))")
    # The pool autoscaler's alerts read the operator's metrics, not the hubs': no operator runs
    # here. tests/chart/test_monitoring.py runs them through promtool on the series the operator
    # exports (tests/operator/test_autoscaling.py holds those series to its decisions).
    on_hubs = {name for name, rule in rules.items() if "hedwig_pool_" not in rule["expr"]}
    assert set(rules) - on_hubs == {"HedwigPoolPinnedAtMaximum", "HedwigPoolScalingStalled"}
    assert {r["metric"]["alertname"] for r in seen} == on_hubs

    # The dashboard, drawn from the same queries over the whole run.
    data = render.fetch(prom.url, VARIABLES, start, end, step=1.0)
    output = Path(os.environ.get("HEDWIG_DASHBOARD_PICTURE") or tmp_path / "load-dashboard.png")
    render.draw(
        data,
        output,
        start=start,
        end=end,
        events=events,
        subtitle=f"3 hubs, {len(TOPICS)} topics at {RATE_PER_TOPIC:.0f} msg/s each "
        "(e2e/test_monitoring.py)",
    )
    assert output.stat().st_size > 50_000
    print(
        json.dumps(
            {
                "picture": str(output),
                "published": load.published,
                "publish_errors": len(load.errors),
            }
        )
    )
