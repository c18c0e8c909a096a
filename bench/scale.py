"""Many topics on one hub: what claiming, owning and listing them costs.

    .venv/bin/python -m bench.scale --topics 100000 [--store zookeeper|etcd|URL]

Starts a ZooKeeper or an etcd (unless ``--store`` is a URL) and one hub in this process (1/1/1
replication), claims ``--topics`` topics through the hub's normal claim path (the one a first
publish takes: topic node, owner record, ledger, persistence info) ``--concurrency`` at a time,
then measures, with every topic owned and idle:

- claims per second;
- hub memory per owned idle topic: the growth of this process's resident memory over the
  claims and the idle period, divided by the topics (the process holds the hub only: the
  store's server runs apart); also as it was 2 s after the last claim;
- the hub's CPU per second while idle for ``--idle`` seconds (the per-second cost of owning
  idle topics: timers, loops, reports);
- the size of its load report, the number of series on its ``/metrics``;
- the time to list every topic of the region from the store.

``--active RATE``: then every topic is made active at a low rate: a client in another process
publishes one message at a time to topic after topic, round robin, ``RATE`` messages a second
over all of them, for ``--active-seconds``; measured: the hub's CPU per second and resident
growth per topic while all are active, and the publish latency (from each message's due time
to its acknowledgement: a client that falls behind its schedule shows it).

``--failover``: instead, a region: a DevCluster of three hub processes (3/3/2) on the store. A
client publishes one message to each of ``--topics`` topics, ``--concurrency`` at a time
(placement spreads them; each first publish claims its topic and writes its first ledger): the
region's claims per second through the normal path, the store's growth per topic (resident
memory of its server, size of its data directory) and each hub's per topic it owns. Then, every
topic owned and idle for ``--idle`` seconds: each process's CPU, each hub's resident growth per
topic it owns, the series on each hub's ``/metrics``, the time to list the region's topics from
the store; with ``--active RATE``, the first ``--active-topics`` topics are then published to at
``RATE`` messages a second in all, round robin, from another process (its latency, each
process's CPU). Then the hub owning the most is killed (``kill -9``), and the time from the kill
until every one of its topics has accepted a publish again is measured (the session or lease
timeout, then the take-overs), ``--failover-concurrency`` publishes in flight: after a failure
every topic's publishers retry at once, so the region, not one client's window, should set the
pace (with 200 in flight the take-overs waited on the client: each is a chain of store and
replica round trips, and the survivors were half idle). Also each process's CPU, in cores, over
the claims and over the take-overs, and the requests the survivors answered per topic taken
over, by operation (``failover_requests_per_take_over``: fences, reads and write-backs of
their storage, publishes): what a take-over costs, independent of the machine's speed.

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

from prometheus_client import generate_latest

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.errors import HedwigError
from hedwig.hub import Hub, HubConfig
from hedwig.hub.process import collector
from hedwig.metadata import open_store
from hedwig.net.loop import install_uvloop
from hedwig.settings import BundleSettings, ConnectionSettings, StorageSettings


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def claim(hub: Hub, name: str, attempts: int = 20) -> None:
    """Claim as a client's retries would: a retriable refusal (the store briefly unreachable)
    is tried again."""
    for attempt in range(attempts):
        try:
            await hub.topics.acquire(name, redirected=True)
            return
        except HedwigError as exc:
            if not exc.retriable or attempt == attempts - 1:
                raise
            RETRIES[0] += 1
            await asyncio.sleep(0.5)


RETRIES = [0]
# Data directories of the store's server and the hub, removed at the end (a 100,000-topic run
# leaves hundreds of megabytes).
SCRATCH: list[str] = []


def _scratch(prefix: str) -> str:
    SCRATCH.append(tempfile.mkdtemp(prefix=prefix))
    return SCRATCH[-1]


# The longest pause of Python's cycle collector during the run (seconds): the event loop, and
# with it the store session's keepalive, stands still meanwhile.
GC_PAUSE = [0.0, 0.0]


def _gc_timer(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        GC_PAUSE[1] = time.monotonic()
    else:
        GC_PAUSE[0] = max(GC_PAUSE[0], time.monotonic() - GC_PAUSE[1])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    zk: ZooKeeperServer | None = None
    etcd: EtcdServer | None = None
    store_url = args.store
    store_dir: str | None = None  # the store's data, when started here (its disk measured)
    if store_url == "zookeeper":
        store_dir = _scratch("hedwig-scale-zk-")
        zk = ZooKeeperServer(data_dir=store_dir, heap="2g")
        zk.start()
        store_url = f"zk://{zk.address}"
    elif store_url == "etcd":
        store_dir = _scratch("hedwig-scale-etcd-")
        etcd = EtcdServer(data_dir=store_dir, memory_limit="2GiB")
        etcd.start()
        store_url = etcd.url
    region = f"scale-{os.getpid()}"
    config = HubConfig(
        connection=ConnectionSettings(
            metadata_url=store_url,
            region=region,
            listen="127.0.0.1:0",
            metadata_session_timeout_s=args.session_timeout,
        ),
        storage=StorageSettings(data_dir=_scratch("hedwig-scale-hub-"), replication="1/1/1"),
        bundles=BundleSettings(enabled=args.bundles),
    )
    hub = Hub(config)
    gc.callbacks.append(_gc_timer)
    out: dict[str, Any] = {
        "store": store_url.split("://")[0],
        "topics": args.topics,
        "bundles": args.bundles,
    }
    try:
        await hub.start()
        collector.settle()  # as a hub process runs it (``hedwig.hub.serve``)
        names = [f"scale/{i:07d}" for i in range(args.topics)]
        rss0 = rss_bytes()
        disk0 = _du(store_dir) if store_dir else 0
        t0 = time.monotonic()
        for start in range(0, len(names), args.concurrency):
            chunk = names[start : start + args.concurrency]
            await asyncio.gather(*(claim(hub, n) for n in chunk))
            if args.progress and (start // args.concurrency) % 20 == 0:
                print(f"{start + len(chunk)} claimed", flush=True)
        claim_s = time.monotonic() - t0
        out["claim_s"] = round(claim_s, 1)
        out["claims_per_s"] = round(args.topics / claim_s, 1)
        out["claim_retries"] = RETRIES[0]
        out["max_gc_pause_s"] = round(GC_PAUSE[0], 2)
        await asyncio.sleep(2)
        if store_dir:
            out["store_disk_bytes_per_topic"] = round((_du(store_dir) - disk0) / args.topics)
        out["hub_bytes_per_topic_after_claims"] = round((rss_bytes() - rss0) / args.topics)
        c0, w0 = cpu_s(), time.monotonic()
        await asyncio.sleep(args.idle)
        out["idle_cpu_per_s"] = round((cpu_s() - c0) / (time.monotonic() - w0), 4)
        # Resident growth once idle: right after the claims it still holds what the last
        # of them left in flight (and the first full audit's reads of every ledger).
        out["hub_bytes_per_idle_topic"] = round((rss_bytes() - rss0) / args.topics)
        report = hub.loops.load_report()
        out["load_report_bytes"] = len(report.to_json())
        hub.loops.refresh_gauges()
        exposition = generate_latest(hub.metrics.registry).decode()
        out["metric_series"] = sum(
            1 for line in exposition.splitlines() if line and not line.startswith("#")
        )
        async with open_store(store_url, region=region) as reader:
            t0 = time.monotonic()
            listed = await reader.topics.list_topics()
            out["list_s"] = round(time.monotonic() - t0, 2)
            out["listed"] = len(listed)
        if args.active:
            out["active"] = await _active(hub, names, args, rss0)
    finally:
        await hub.stop()
        if zk is not None:
            zk.stop()
        if etcd is not None:
            etcd.stop()
        while SCRATCH:
            shutil.rmtree(SCRATCH.pop(), ignore_errors=True)
    return out


async def failover(args: argparse.Namespace, out: dict[str, Any]) -> dict[str, Any]:
    """Fills ``out`` as it goes: a run that fails part-way (at a million topics that is
    half an hour in) still prints what it measured."""
    store = "etcd" if args.store == "etcd" else "zookeeper"
    names = [f"fo/{i:07d}" for i in range(args.topics)]
    out.update({"store": store, "topics": args.topics, "mode": "failover", "bundles": args.bundles})
    # ZooKeeper's default heap (256 MB) runs out at about 100,000 topics (half a million
    # znodes): the server dies, as it did in a 200,000-topic run. It holds about 5 KB a
    # topic (resident, 200,000 topics): 4 GB up to about 500,000 topics, then 8 KB a topic.
    # etcd gets the same budget (``hedwig.devcluster.etcd.GOGC_WITH_LIMIT``): with Go's
    # default collector it marked its whole heap every few seconds during a failover.
    heap_mb = max(4096, args.topics * 8 // 1024)
    with DevCluster(
        hubs=3,
        region="scale",
        session_timeout_s=args.session_timeout,
        store=store,
        zk_heap=f"{heap_mb}m",
        etcd_memory=f"{heap_mb}MiB",
        hub_args=["--bundles"] if args.bundles else [],
    ) as cluster:
        try:
            await _region(cluster, names, args, out)
        finally:
            if args.logs:
                # The hubs' and the store's logs, before the cluster's directory goes.
                os.makedirs(args.logs, exist_ok=True)
                for i, h in enumerate(cluster.hub_procs):
                    with contextlib.suppress(OSError):
                        shutil.copy(h.log_path, os.path.join(args.logs, f"hub{i}.log"))
                if cluster.etcd_server is not None:
                    with contextlib.suppress(OSError):
                        shutil.copy(
                            os.path.join(cluster.etcd_server.data_dir, "etcd.log"), args.logs
                        )
    out["session_timeout_s"] = args.session_timeout
    out["concurrency"], out["failover_concurrency"] = args.concurrency, args.failover_concurrency
    return out


async def _region(
    cluster: DevCluster, names: list[str], args: argparse.Namespace, out: dict[str, Any]
) -> None:
    retry = RetryPolicy(deadline_s=120)
    store_pid: int | None
    store_dir: str | None
    if cluster.etcd_server is not None:
        store_pid, store_dir = cluster.etcd_server.pid, cluster.etcd_server.data_dir
    else:
        assert cluster.zk_server is not None
        assert cluster.zk_server.proc is not None
        store_pid, store_dir = cluster.zk_server.proc.pid, cluster.zk_server.data_dir
    assert store_pid is not None
    assert store_dir is not None
    hub_rss0 = {h.address: _rss_of(h.proc.pid) for h in cluster.hub_procs if h.proc}
    store0 = (_rss_of(store_pid), _du(store_dir))
    pids = {f"hub{i}": h.proc.pid for i, h in enumerate(cluster.hub_procs) if h.proc}
    pids["store"], pids["client"] = store_pid, os.getpid()
    # The client is a load generator sharing the machine with the region: it runs as the
    # hubs do (uvloop, ``main``; the cycle collector settled), or it spent more than half its
    # CPU walking its own heap (the topic names, its table of routes) and took a seventh of
    # the machine during a failover, CPU the region's take-overs then lacked.
    collector.settle()
    async with HedwigClient(cluster.addresses, retry=retry) as client:
        answered0 = _answered(cluster, "")
        cpu0, t0 = _cpu_of(pids), time.monotonic()
        out["claims_failed"] = len(
            await _publish_all(client, names, args.concurrency, args.progress)
        )
        took = time.monotonic() - t0
        answered = _answered(cluster, "")
        out["claims_requests_per_topic"] = {
            op: round((n - answered0.get(op, 0)) / len(names), 2)
            for op, n in sorted(answered.items())
            if n > answered0.get(op, 0)
        }
        out["claims_cpu_cores"] = _cores(pids, cpu0, took)
        out["first_publish_s"] = round(took, 1)
        out["region_claims_per_s"] = round(args.topics / took, 1)
        owners: dict[str, list[str]] = {}
        for n in names:
            owners.setdefault(client.owner_of(n) or "?", []).append(n)
    await asyncio.sleep(2)
    out["store_rss_bytes_per_topic"] = round((_rss_of(store_pid) - store0[0]) / args.topics)
    out["store_disk_bytes_per_topic"] = round((_du(store_dir) - store0[1]) / args.topics)
    out["hub_bytes_per_owned_topic"] = [
        round((_rss_of(h.proc.pid) - hub_rss0[h.address]) / len(owners.get(h.address, [1])))
        for h in cluster.hub_procs
        if h.proc
    ]
    await _region_idle(cluster, pids, owners, hub_rss0, args, out)
    if args.active:
        out["active"] = await _region_active(cluster, pids, names, args)
    out["troubles_before_the_kill"] = _troubles(cluster)
    victim, theirs = max(owners.items(), key=lambda kv: len(kv[1]))
    out["victim_topics"] = len(theirs)
    survivors = [a for a in cluster.addresses if a != victim]
    dead = [k for k, h in zip(pids, cluster.hub_procs, strict=False) if h.address == victim]
    answered0 = _answered(cluster, victim)
    collector.settle()
    async with HedwigClient(survivors, retry=retry) as client:
        cluster.hub_at(victim).kill()
        cpu0, t0 = _cpu_of({k: p for k, p in pids.items() if k not in dead}), time.monotonic()
        acked_at: list[float] = []
        failed = await _publish_all(
            client, theirs, args.failover_concurrency, args.progress, acked_at
        )
        out["failover_s"] = round(time.monotonic() - t0, 1)
        out["failover_timeline_s"] = _timeline(acked_at, t0)
        # Those that failed once (their retries' deadline passed), tried again after.
        out["failover_failed_first"] = len(failed)
        out["failover_failed_again"] = len(
            await _publish_all(client, failed, args.failover_concurrency)
        )
        out["failover_all_s"] = round(time.monotonic() - t0, 1)
        out["troubles_at_the_end"] = _troubles(cluster, victim)
        answered = _answered(cluster, victim)
        out["failover_requests_per_take_over"] = {
            op: round((n - answered0.get(op, 0)) / max(1, len(theirs)), 2)
            for op, n in sorted(answered.items())
            if n > answered0.get(op, 0)
        }
        out["failover_cpu_cores"] = _cores(
            {k: p for k, p in pids.items() if k not in dead}, cpu0, time.monotonic() - t0
        )


def _timeline(acked_at: list[float], t0: float) -> dict[str, float]:
    """When the first, and each tenth, of a failover's topics had accepted a publish, seconds
    after the kill: the wait for the session (or lease) to end, then the take-overs' pace."""
    if not acked_at:
        return {}
    acked_at.sort()
    marks = {"first": acked_at[0]}
    for tenth in range(1, 11):
        marks[f"{tenth * 10}%"] = acked_at[min(len(acked_at), len(acked_at) * tenth // 10) - 1]
    return {k: round(v - t0, 1) for k, v in marks.items()}


async def _region_idle(
    cluster: DevCluster,
    pids: dict[str, int],
    owners: dict[str, list[str]],
    rss0: dict[str, int],
    args: argparse.Namespace,
    out: dict[str, Any],
) -> None:
    """Every topic owned and idle, for ``--idle`` seconds: each process's CPU, each hub's
    resident growth per topic it owns, the series on each hub's ``/metrics``, and the time to
    list every topic of the region from the store."""
    cpu0, t0 = _cpu_of(pids), time.monotonic()
    await asyncio.sleep(args.idle)
    out["idle_cpu_cores"] = _cores(pids, cpu0, time.monotonic() - t0)
    out["hub_bytes_per_owned_idle_topic"] = [
        round((_rss_of(h.proc.pid) - rss0[h.address]) / len(owners.get(h.address, [1])))
        for h in cluster.hub_procs
        if h.proc
    ]
    out["owned_topics"] = [len(owners.get(h.address, [])) for h in cluster.hub_procs]
    out["metric_series"] = [_series(h.metrics_url) for h in cluster.hub_procs]
    out["troubles_after_claims"] = _troubles(cluster)
    url = cluster.zk if "://" in cluster.zk else f"zk://{cluster.zk}"
    async with open_store(url, region=cluster.region) as reader:
        t0 = time.monotonic()
        listed = await reader.topics.list_topics()
        out["list_s"] = round(time.monotonic() - t0, 2)
        out["listed"] = len(listed)
        del listed


def _series(metrics_url: str) -> int:
    """How many series a hub's ``/metrics`` exposes (its lines that are not comments)."""
    return sum(1 for line in _metrics(metrics_url) if not line.startswith("#"))


def _metrics(metrics_url: str) -> list[str]:
    with urllib.request.urlopen(metrics_url + "/metrics", timeout=30) as r:
        return [line for line in r.read().decode().splitlines() if line]


def _answered(cluster: DevCluster, dead: str) -> dict[str, float]:
    """Requests the hubs other than ``dead`` have answered, by operation and, for those not
    answered OK, status (their ``hedwig_requests_total``): over a failover, per topic taken
    over, what a take-over asks of the other hubs' storage (fences, reads, write-backs, LAC
    notices) and of the owners; over the claims (``dead`` empty: every hub), what a topic's
    first publish asks of the region (redirects, replica writes)."""
    out: dict[str, float] = {}
    for h in cluster.hub_procs:
        if h.address == dead:
            continue
        for line in _metrics(h.metrics_url):
            if line.startswith("hedwig_requests_total{"):
                name, _, value = line.rpartition(" ")
                op = name.split('op="', 1)[1].split('"', 1)[0]
                status = name.split('status="', 1)[1].split('"', 1)[0]
                key = op if status in ("ok", "OK") else f"{op}:{status}"
                out[key] = out.get(key, 0.0) + float(value)
    return out


def _troubles(cluster: DevCluster, dead: str | None = None) -> dict[str, dict[str, float]]:
    """Per hub still running: its event loop's stalls and cycle-collector pauses over 2 s,
    the metadata sessions it lost (each one drops every topic it owns), and per generation its
    collections (``gcN``), their total pause (``gcN_s``) and the bound of the longest
    (``gcN_max_s``: the smallest histogram bucket that holds them all)."""
    wanted = {
        'hedwig_loop_stall_seconds_count{cause="loop"}': "loop_stalls",
        'hedwig_loop_stall_seconds_sum{cause="loop"}': "loop_stall_s",
        'hedwig_loop_stall_seconds_count{cause="gc"}': "gc_pauses",
        'hedwig_loop_stall_seconds_sum{cause="gc"}': "gc_pause_s",
        "hedwig_zk_session_losses_total": "session_losses",
    }
    out: dict[str, dict[str, float]] = {}
    for i, h in enumerate(cluster.hub_procs):
        if h.address == dead:
            continue
        got: dict[str, float] = {}
        buckets: dict[str, list[tuple[float, float]]] = {}
        for line in _metrics(h.metrics_url):
            name, _, value = line.rpartition(" ")
            if name in wanted:
                got[wanted[name]] = round(float(value), 1)
            elif name.startswith("hedwig_gc_pause_seconds_"):
                labels = dict(kv.split("=", 1) for kv in name[name.index("{") + 1 : -1].split(","))
                gen = "gc" + labels["generation"].strip('"')
                if name.startswith("hedwig_gc_pause_seconds_count"):
                    got[gen] = float(value)
                elif name.startswith("hedwig_gc_pause_seconds_sum"):
                    got[gen + "_s"] = round(float(value), 2)
                elif "le" in labels and labels["le"] != '"+Inf"':
                    le = float(labels["le"].strip('"'))
                    buckets.setdefault(gen, []).append((le, float(value)))
        for gen, counts in buckets.items():
            held = [le for le, n in sorted(counts) if n >= got.get(gen, 0)]
            got[gen + "_max_s"] = held[0] if held else float("inf")
        out[f"hub{i}"] = got
    return out


async def _region_active(
    cluster: DevCluster, pids: dict[str, int], names: list[str], args: argparse.Namespace
) -> dict[str, Any]:
    """The first ``--active-topics`` topics active at a low rate (``--active`` messages a
    second over all of them, round robin), published to from another process: each process's
    CPU meanwhile, the publisher's latency."""
    cmd = [
        sys.executable,
        "-m",
        "bench.scale",
        "--publish-to",
        ",".join(cluster.addresses),
        "--prefix",
        "fo/",
        "--topics",
        str(min(args.active_topics or len(names), len(names))),
        "--active",
        str(args.active),
        "--active-seconds",
        str(args.active_seconds),
    ]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE)
    cpu0, t0 = _cpu_of(pids), time.monotonic()
    stdout, _ = await proc.communicate()
    got: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    got["cpu_cores"] = _cores(pids, cpu0, time.monotonic() - t0)
    return got


def _cpu_of(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user and system) each process has used."""
    out = {}
    for name, pid in pids.items():
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        out[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def _cores(pids: dict[str, int], before: dict[str, float], seconds: float) -> dict[str, float]:
    now = _cpu_of(pids)
    return {k: round((now[k] - before[k]) / seconds, 2) for k in pids}


def _rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _du(path: str) -> int:
    """Bytes of disk the files under ``path`` take (allocated blocks, as ``du`` counts)."""
    total = 0
    for root, _, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.stat(os.path.join(root, f)).st_blocks * 512
    return total


async def _active(
    hub: Hub, names: list[str], args: argparse.Namespace, rss0: int
) -> dict[str, Any]:
    """Every topic active at a low rate, published to from another process (its CPU is not
    the hub's): the hub's CPU and memory meanwhile, the client's latency."""
    cmd = [
        sys.executable,
        "-m",
        "bench.scale",
        "--publish-to",
        hub.address,
        "--topics",
        str(len(names)),
        "--active",
        str(args.active),
        "--active-seconds",
        str(args.active_seconds),
    ]
    proc = await asyncio.create_subprocess_exec(*cmd, stdout=subprocess.PIPE)
    c0, w0 = cpu_s(), time.monotonic()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    stdout, _ = await proc.communicate()
    wall = time.monotonic() - w0
    got: dict[str, Any] = json.loads(stdout.decode().strip().splitlines()[-1])
    got["hub_cpu_per_s"] = round((cpu_s() - c0) / wall, 4)
    # The kernel's share: appends and a sync per ledger file written in each group commit.
    got["hub_system_cpu_per_s"] = round(
        (resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0) / wall, 4
    )
    got["hub_bytes_per_active_topic"] = round((rss_bytes() - rss0) / len(names))
    return got


async def _publisher(
    addresses: str, topics: int, rate: float, seconds: float, prefix: str = "scale/"
) -> dict[str, Any]:
    """``--publish-to HOST:PORT[,...]``: one message at a time to topic after topic, ``rate``
    a second in all, each timed from when it was due to its acknowledgement."""
    names = [f"{prefix}{i:07d}" for i in range(topics)]
    total = int(rate * seconds)
    lat: list[float] = []
    # Messages to a topic published to before (the first to each claims nothing, but makes
    # the client's publisher and the hub's duplicate table for it).
    again: list[float] = []
    failed = [0]
    cpu0 = cpu_s()
    async with HedwigClient(addresses.split(","), retry=RetryPolicy(deadline_s=60)) as client:
        start = time.monotonic()
        sent = 0
        while sent < total:
            due = min(total, int((time.monotonic() - start) * rate) + 1)
            while sent < due:
                t_due = start + sent / rate
                fut = client.publish_nowait(names[sent % topics], b"x" * 100)

                def done(f: asyncio.Future[Any], t: float = t_due, n: int = sent) -> None:
                    if f.exception() is not None:
                        failed[0] += 1
                    else:
                        lat.append(time.monotonic() - t)
                        if n >= topics:
                            again.append(lat[-1])

                fut.add_done_callback(done)
                sent += 1
            await asyncio.sleep(0.001)
        await client.flush()
        elapsed = time.monotonic() - start
    lat.sort()
    again.sort()

    def pick(q: float, of: list[float] = lat) -> float:
        return round(of[min(len(of) - 1, int(q * len(of)))] * 1000, 2) if of else 0.0

    return {
        "messages": total,
        "failed": failed[0],
        "achieved_rate": round(total / elapsed),
        "topics_touched": min(total, topics),
        "client_cpu_per_s": round((cpu_s() - cpu0) / elapsed, 3),
        "p50_ms": pick(0.5),
        "p99_ms": pick(0.99),
        "max_ms": round(lat[-1] * 1000, 2) if lat else 0.0,
        "again_p50_ms": pick(0.5, again),
        "again_p99_ms": pick(0.99, again),
    }


async def _publish_all(
    client: HedwigClient,
    names: list[str],
    concurrency: int,
    progress: bool = False,
    acked_at: list[float] | None = None,
) -> list[str]:
    """One message to each topic, ``concurrency`` at a time; the topics whose publish failed
    (its retries' deadline passed), which the caller counts: one failure must not end a run of
    a million topics with nothing printed. ``acked_at`` gets the moment of each acknowledged
    publish (``time.monotonic``), for a failover's timeline."""
    todo = iter(names)
    done = 0
    failed: list[str] = []

    async def worker() -> None:
        nonlocal done
        for n in todo:
            try:
                await client.publish(n, b"x")
                if acked_at is not None:
                    acked_at.append(time.monotonic())
            except HedwigError as exc:
                if not failed:
                    print(f"publishing to {n} failed: {exc!r}", file=sys.stderr)
                failed.append(n)
            done += 1

    async def report() -> None:
        t0 = time.monotonic()
        while True:
            await asyncio.sleep(10)
            print(f"{time.monotonic() - t0:.0f}s: {done}/{len(names)}", file=sys.stderr)

    reporter = asyncio.get_running_loop().create_task(report()) if progress else None
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        if reporter is not None:
            reporter.cancel()
    return failed


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--topics", type=int, default=10_000)
    p.add_argument(
        "--store",
        default="zookeeper",
        help="zookeeper or etcd (a server started here), or a metadata store URL",
    )
    p.add_argument("--concurrency", type=int, default=500, help="claims in flight")
    p.add_argument(
        "--failover-concurrency",
        type=int,
        default=2000,
        help="publishes in flight after the kill (--failover)",
    )
    p.add_argument("--idle", type=float, default=30.0, help="seconds of idle CPU measured")
    p.add_argument("--session-timeout", type=float, default=6.0)
    p.add_argument("--progress", action="store_true")
    p.add_argument("--bundles", action="store_true", help="hubs own topics by bundle")
    p.add_argument("--failover", action="store_true", help="measure a failover instead")
    p.add_argument(
        "--active", type=float, default=0.0, help="then every topic active: messages/s in all"
    )
    p.add_argument("--active-seconds", type=float, default=30.0)
    p.add_argument(
        "--active-topics",
        type=int,
        default=0,
        help="--failover: how many topics --active spreads over (default: all)",
    )
    p.add_argument("--prefix", default="scale/", help=argparse.SUPPRESS)
    p.add_argument("--logs", help="--failover: copy the hubs' and the store's logs here at the end")
    p.add_argument("--publish-to", help=argparse.SUPPRESS)  # the --active publisher process
    args = p.parse_args()
    install_uvloop()  # as the hubs and ``hedwig bench`` run
    if args.publish_to:
        result = asyncio.run(
            _publisher(args.publish_to, args.topics, args.active, args.active_seconds, args.prefix)
        )
    else:
        result = {}
        try:
            result = asyncio.run(failover(args, result) if args.failover else run(args))
        except (Exception, KeyboardInterrupt) as exc:
            result["failed"] = repr(exc)
            print(json.dumps(result))
            raise
    print(json.dumps(result))


if __name__ == "__main__":
    main()
