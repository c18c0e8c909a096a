"""The operator and very many Topic resources: how fast they become Ready, and what keeping
their status fresh costs once they are.

    PYTHONPATH=. .venv/bin/python -m bench.operator_topics --topics 1000 [--store zookeeper|etcd]

The operator runs against a real API server, as its end-to-end tests run it
(``e2e/test_operator.py``): the e2e control plane (kube-apiserver and its etcd, the
controllers and kwok, from ``e2e/controlplane``), the shipped CRDs and RBAC, the operator as a
local process under its ServiceAccount's token, a ZooKeeper or an etcd as the metadata store,
and a HubPool of two local hub processes (1/1/1 replication) registered in the pool's region.
kwok runs the pool's pods, but no pod serves: a Topic is Ready once one of the local hubs owns
its topic, and that is all the operator asks of a pool.

Unlike the e2e tests, the operator runs as its Deployment (``operator/deploy/operator.yaml``)
runs it: with its default settings (each pool's Topics refreshed every 15 s) and without
``--verbose`` (kopf's debug log is a cost of its own per event). The settings are printed.

Measured:

- from the start of creating ``--topics`` Topics (``kubectl create -f`` of Lists of
  ``--batch`` Topics, ``--parallel`` such commands at once) until every Topic has Ready=True
  (seen by listing the namespace's Topics as JSON, 500 a page, every ``--poll`` s or less
  often when a list takes long): the time, Topics Ready per second, and the same from the
  Ready conditions' transition times (to the second, free of the polling's delay); the API
  server's requests per Topic meanwhile;
- the CPU (cores) and resident memory of the operator during the creation; the hubs' and the
  API server's CPU;
- once settled (no Topic's status written for ``--settle`` s: the first refresh after the
  creation writes every Topic's status once more: its rates, now in its owner's load report),
  an idle window of ``--idle`` s with every Topic Ready and nothing changing: the same
  figures, which are now the per-second cost of the operator's periodic refresh of every Topic
  (each reconciled again: about six metadata reads, and a status patch only if its status
  changed), the API server's requests, the metadata store's requests (of every client; on
  ZooKeeper also of the operator's own connection), and how long the operator stays busy at
  each refresh (runs of half-second samples above 0.15 of a core: a refresh longer than the
  status interval is one run as long as the window);
- a baseline of the idle figures over ``--baseline`` s before any Topic exists (the pool's own
  refresh, the hubs' keepalives and load reports), to set the idle window's figures against.

The machine's load average is printed with them: on a busy machine everything takes longer.
Prints one JSON object.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import datetime as dt
import itertools
import json
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

# The e2e helpers import as the e2e tests import them (pytest puts e2e/ on sys.path).
E2E = Path(__file__).resolve().parents[1] / "e2e"
if str(E2E) not in sys.path:
    sys.path.insert(0, str(E2E))

from hedwig_operator.settings import OperatorSettings  # noqa: E402

from controlplane import cluster  # noqa: E402
from hedwig.devcluster.cluster import HubProcess  # noqa: E402
from hedwig.devcluster.etcd import EtcdServer  # noqa: E402
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port  # noqa: E402
from hedwig_e2e import (  # noqa: E402
    STORAGE_CLASS,
    OperatorProcess,
    install_operator_access,
    static_volume,
    wait_for,
)

NS = "hedwig-bench"
POOL = "bench"
GROUP_VERSION = "hedwig.io/v1alpha1"
HUBS = 2
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
# A half-second sample of the operator above this share of a core counts as busy refreshing.
BUSY_CORES = 0.15


# ------------------------------------------------------------------------------ processes


def cpu_of(pid: int) -> float:
    """CPU seconds (user and system) the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def rss_of(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def pid_of(binary: str, argument: str) -> int | None:
    """The process running ``binary`` with ``argument`` among its arguments."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(binary.encode()) and argument.encode() in argv:
            return int(entry)
    return None


@dataclasses.dataclass
class Watched:
    """The processes whose CPU is measured: the operator, the hubs, the API server."""

    operator: int
    hubs: list[int]
    apiserver: int | None

    def cpu(self) -> dict[str, float]:
        out = {"operator": cpu_of(self.operator), "hubs": sum(cpu_of(p) for p in self.hubs)}
        if self.apiserver is not None:
            out["apiserver"] = cpu_of(self.apiserver)
        return out


def cores(before: Mapping[str, float], after: Mapping[str, float], wall: float) -> dict[str, float]:
    return {f"{k}_cpu": round((after[k] - before[k]) / wall, 3) for k in before}


# ------------------------------------------------------------------------------ API server


def api_requests(cp: cluster.ControlPlane) -> collections.Counter[str]:
    """The API server's ``apiserver_request_total``, by verb and resource[/subresource]."""
    text = cp.kubectl("get", "--raw", "/metrics", timeout=120).stdout
    out: collections.Counter[str] = collections.Counter()
    prefix = "apiserver_request_total{"
    for line in text.splitlines():
        if not line.startswith(prefix):
            continue
        labels_text, value = line[len(prefix) :].rsplit("} ", 1)
        labels = dict(re.findall(r'(\w+)="([^"]*)"', labels_text))
        sub = labels.get("subresource")
        out[f"{labels['verb']} {labels['resource']}{'/' + sub if sub else ''}"] += int(float(value))
    return out


def request_delta(
    before: collections.Counter[str], after: collections.Counter[str], per: float = 1.0
) -> dict[str, float]:
    """The requests made between two readings (divided by ``per``), most first."""
    delta = {k: after[k] - before.get(k, 0) for k in after}
    return {
        k: round(v / per, 3)
        for k, v in sorted(delta.items(), key=lambda kv: -kv[1])
        if v > 0 and k.split()[-1] != "metrics"  # this benchmark's own readings
    }


# --------------------------------------------------------------------------- metadata store


def zk_command(address: str, command: str) -> str:
    """A ZooKeeper four-letter command's answer."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(command.encode())
        chunks = []
        while data := s.recv(65536):
            chunks.append(data)
    return b"".join(chunks).decode(errors="replace")


def local_ports_to(pid: int, port: int) -> set[int]:
    """The local ports of the process's TCP connections to ``port``."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:[") : -1])
    ports = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[9] in inodes and int(f[2].rsplit(":", 1)[1], 16) == port:
                ports.add(int(f[1].rsplit(":", 1)[1], 16))
    return ports


class Store:
    """The metadata store's server and its request counters."""

    def __init__(self, kind: str, workdir: Path) -> None:
        self.kind = kind
        self.zk: ZooKeeperServer | None = None
        self.etcd: EtcdServer | None = None
        if kind == "zookeeper":
            self.zk = ZooKeeperServer(data_dir=str(workdir / "zookeeper"), heap="1g")
        else:
            (workdir / "etcd").mkdir()
            self.etcd = EtcdServer(data_dir=str(workdir / "etcd"))

    def start(self) -> None:
        if self.zk is not None:
            self.zk.start()
        elif self.etcd is not None:
            self.etcd.start()

    def stop(self) -> None:
        if self.zk is not None:
            self.zk.stop()
        if self.etcd is not None:
            self.etcd.stop()

    @property
    def url(self) -> str:
        if self.zk is not None:
            return f"zk://{self.zk.address}"
        assert self.etcd is not None
        return self.etcd.url

    def pool_spec(self) -> dict[str, Any]:
        """How a HubPool names this store."""
        return {"metadata": {"url": self.url}}

    def requests(self) -> float:
        """Requests the server has handled, from every client: ZooKeeper's packets received
        (requests and pings), etcd's unary gRPC calls (reads, writes, transactions)."""
        if self.zk is not None:
            for line in zk_command(self.zk.address, "mntr").splitlines():
                key, _, value = line.partition("\t")
                if key == "zk_packets_received":
                    return float(value)
            return 0.0
        assert self.etcd is not None
        with urllib.request.urlopen(f"http://{self.etcd.address}/metrics", timeout=10) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("grpc_server_handled_total{") and 'grpc_type="unary"' in line
        )

    def requests_of(self, pid: int) -> float | None:
        """Requests from the process's own connections (ZooKeeper only: its ``cons``)."""
        if self.zk is None:
            return None
        ports = local_ports_to(pid, self.zk.port)
        total = 0.0
        for m in re.finditer(
            r"/[\d.]+:(\d+)\[\d+\]\([^)]*?recved=(\d+)", zk_command(self.zk.address, "cons")
        ):
            if int(m.group(1)) in ports:
                total += float(m.group(2))
        return total


# ---------------------------------------------------------------------------------- Topics


def topic_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Topic",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"pool": POOL, "topicName": f"bench/{name}"},
    }


def list_topics(cp: cluster.ControlPlane) -> list[dict[str, Any]]:
    proc = cp.kubectl("get", "topics", "-n", NS, "-o", "json", "--chunk-size=500", timeout=600)
    items: list[dict[str, Any]] = json.loads(proc.stdout)["items"]
    return items


def ready_condition(topic: Mapping[str, Any]) -> Mapping[str, Any]:
    for c in (topic.get("status") or {}).get("conditions") or ():
        if c.get("type") == "Ready":
            return dict(c)
    return {}


def states(items: Sequence[Mapping[str, Any]]) -> collections.Counter[str]:
    """Topics by state: ``Ready``, else the Ready condition's reason (``NoStatus``: none yet)."""
    out: collections.Counter[str] = collections.Counter()
    for t in items:
        c = ready_condition(t)
        out["Ready" if c.get("status") == "True" else str(c.get("reason") or "NoStatus")] += 1
    return out


def parse_time(text: str) -> float:
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()


def transitions(items: Sequence[Mapping[str, Any]], start_wall: float) -> dict[str, float]:
    """From the Ready conditions' transition times (whole seconds): when the last Topic
    became Ready after the creation started, and each Topic's time from its creation to
    Ready (median, max)."""
    ready_at, latency = [], []
    for t in items:
        c = ready_condition(t)
        if c.get("status") != "True":
            continue
        at = parse_time(str(c["lastTransitionTime"]))
        ready_at.append(at)
        latency.append(at - parse_time(t["metadata"]["creationTimestamp"]))
    if not ready_at:
        return {}
    latency.sort()
    return {
        "last_ready_s": round(max(ready_at) - start_wall, 1),
        "create_to_ready_p50_s": latency[len(latency) // 2],
        "create_to_ready_max_s": latency[-1],
    }


# ------------------------------------------------------------------------------ the run


class Bench:
    """One run: the store, the hubs and the operator it started (``stop`` ends them)."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args = args
        self.workdir = workdir
        self.store = Store(args.store, workdir)
        self.hubs: list[HubProcess] = []
        self.operator: OperatorProcess | None = None
        self.settings: dict[str, str] = {}
        if args.status_interval is not None:
            self.settings["HEDWIG_OPERATOR_STATUS_INTERVAL_S"] = str(args.status_interval)

    def log(self, message: str) -> None:
        if self.args.progress:
            print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)

    def run(self, cp: cluster.ControlPlane) -> dict[str, Any]:
        args = self.args
        out: dict[str, Any] = {
            "topics": args.topics,
            "store": args.store,
            "hubs": HUBS,
            "cpus": os.cpu_count(),
            "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
            "kubernetes": cp.version,
            "operator_settings": dataclasses.asdict(OperatorSettings.from_env(self.settings)),
            "operator_flags": "-n NAMESPACE (as operator/deploy/operator.yaml; no --verbose)",
            "create_method": f"kubectl create -f of Lists of {args.batch} Topics, "
            f"{args.parallel} commands at once",
        }
        self.store.start()
        cp.create_namespace(NS)
        kubeconfig = install_operator_access(cp, NS)
        for i in range(HUBS):
            cp.apply(static_volume(f"bench-volume-{i}", self.workdir / f"volume-{i}", "1Gi"))
            hub = HubProcess(
                self.store.url,
                POOL,
                str(self.workdir / f"hub-{i}"),
                extra_args=["--replication", "1/1/1", "--placement", "least-loaded"],
            )
            self.hubs.append(hub)
            hub.start()
        # As the Deployment runs it: without --verbose.
        self.operator = OperatorProcess(
            NS,
            cp.env(kubeconfig),
            self.workdir / "operator.log",
            free_port(),
            self.settings,
            verbose=False,
        )
        self.operator.start()
        assert self.operator.proc is not None
        watched = Watched(
            self.operator.proc.pid,
            [h.proc.pid for h in self.hubs if h.proc is not None],
            pid_of("kube-apiserver", f"--secure-port={cp.api_port}"),
        )
        cp.apply(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "HubPool",
                "metadata": {"name": POOL, "namespace": NS},
                "spec": {
                    "replicas": HUBS,
                    "image": "hedwig/hub:bench",
                    "region": POOL,
                    "storage": {"size": "1Gi", "storageClassName": STORAGE_CLASS},
                    # Its hubs are the local open processes above (a pool without it is secured).
                    "security": {"enabled": False},
                    **self.store.pool_spec(),
                },
            },
            namespace=NS,
        )

        def alive_hubs() -> bool:
            pool = cp.kubectl_json("get", "hubpool", POOL, "-n", NS)
            return bool((pool.get("status") or {}).get("aliveHubs") == HUBS)

        wait_for(f"{HUBS} alive hubs in the pool's status", alive_hubs, 120)
        self.log("pool ready; baseline")
        out["baseline"] = self.window(cp, watched, args.baseline)

        self.log(f"creating {args.topics} Topics")
        out.update(self.create(cp, watched))
        self.log(f"settling: until no Topic status is written for {args.settle} s")
        out["settle_s"] = self.settle(cp)
        self.log(f"idle window {args.idle} s")
        out["idle"] = self.window(cp, watched, args.idle)
        final = list_topics(cp)
        out["ready_after_idle"] = states(final).get("Ready", 0)
        out["operator_log"] = self.log_summary()
        out["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
        return out

    def create(self, cp: cluster.ControlPlane, watched: Watched) -> dict[str, Any]:
        args = self.args
        names = [f"t-{i:06d}" for i in range(args.topics)]
        batches = [names[i : i + args.batch] for i in range(0, len(names), args.batch)]
        assert self.operator is not None
        assert self.operator.proc is not None
        op_pid = self.operator.proc.pid

        def create(batch: list[str]) -> float:
            """Create the batch; returns when it was done (monotonic)."""
            items = [topic_manifest(n) for n in batch]
            cp.kubectl(
                "create",
                "-f",
                "-",
                "-n",
                NS,
                input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
                timeout=1200,
            )
            return time.monotonic()

        api0 = api_requests(cp)
        rss_max = rss_of(op_pid)
        cpu0 = watched.cpu()
        start_wall, t0 = time.time(), time.monotonic()
        deadline = t0 + args.timeout
        created_s: float | None = None
        ready_s: float | None = None
        polls = 0
        last: collections.Counter[str] = collections.Counter()
        items: list[dict[str, Any]] = []
        with ThreadPoolExecutor(args.parallel) as pool:
            futures: list[Future[float]] = [pool.submit(create, b) for b in batches]
            while True:
                t_poll = time.monotonic()
                items = list_topics(cp)
                polls += 1
                rss_max = max(rss_max, rss_of(op_pid))
                now = time.monotonic()
                last = states(items)
                if created_s is None and all(f.done() for f in futures):
                    # A failed kubectl create fails the run.
                    created_s = max(f.result() for f in futures) - t0
                if polls % 5 == 1:
                    self.log(f"{now - t0:.0f} s: {dict(last)}")
                if created_s is not None and last.get("Ready", 0) >= args.topics:
                    ready_s = now - t0
                    break
                if now > deadline:
                    break
                time.sleep(max(0.0, max(args.poll, 2 * (now - t_poll)) - (now - t_poll)))
        wall = time.monotonic() - t0
        cpu1 = watched.cpu()
        rss_end = rss_of(op_pid)
        api1 = api_requests(cp)
        ready = last.get("Ready", 0)
        out: dict[str, Any] = {
            "create_s": round(created_s, 1) if created_s is not None else None,
            "ready_s": round(ready_s, 1) if ready_s is not None else None,
            "ready": ready,
            "not_ready": {k: v for k, v in last.items() if k != "Ready"},
            "ready_per_s": round(ready / wall, 1),
            "ready_polls": polls,
            **transitions(items, start_wall),
        }
        if "last_ready_s" in out and out["last_ready_s"] > 0:
            out["ready_per_s_by_transitions"] = round(ready / out["last_ready_s"], 1)
        out["creation"] = {
            **cores(cpu0, cpu1, wall),
            "operator_cpu_s": round(cpu1["operator"] - cpu0["operator"], 1),
            "operator_cpu_ms_per_topic": round(
                (cpu1["operator"] - cpu0["operator"]) * 1000 / args.topics, 2
            ),
            "operator_rss_max_mb": round(rss_max / 2**20, 1),
            "operator_rss_end_mb": round(rss_end / 2**20, 1),
            "api_requests_per_topic": request_delta(api0, api1, args.topics),
        }
        return out

    def settle(self, cp: cluster.ControlPlane) -> float:
        """Wait until no Topic's status has been written for ``--settle`` s (at most
        ``--settle-max`` s); returns how long it took."""
        t0 = time.monotonic()
        quiet_since = t0
        patches = api_requests(cp)["PATCH topics/status"]
        while True:
            time.sleep(5)
            now = time.monotonic()
            again = api_requests(cp)["PATCH topics/status"]
            if again != patches:
                patches, quiet_since = again, now
            if now - quiet_since >= self.args.settle or now - t0 >= self.args.settle_max:
                return round(now - t0, 1)

    def window(self, cp: cluster.ControlPlane, watched: Watched, seconds: float) -> dict[str, Any]:
        """The idle figures over ``seconds``: CPU, memory, requests, busy runs."""
        op_pid = watched.operator
        api0 = api_requests(cp)
        store0, mine0 = self.store.requests(), self.store.requests_of(op_pid)
        cpu0 = watched.cpu()
        t0 = time.monotonic()
        samples = [(t0, cpu_of(op_pid))]
        rss_max = rss_of(op_pid)
        end = t0 + seconds
        while (now := time.monotonic()) < end:
            time.sleep(min(0.5, end - now))
            samples.append((time.monotonic(), cpu_of(op_pid)))
            rss_max = max(rss_max, rss_of(op_pid))
        wall = time.monotonic() - t0
        cpu1 = watched.cpu()
        store1, mine1 = self.store.requests(), self.store.requests_of(op_pid)
        api1 = api_requests(cp)
        runs: list[float] = []
        run = 0.0
        for (ta, ca), (tb, cb) in itertools.pairwise(samples):
            if (cb - ca) / (tb - ta) > BUSY_CORES:
                run += tb - ta
            elif run:
                runs.append(round(run, 1))
                run = 0.0
        if run:
            runs.append(round(run, 1))
        out: dict[str, Any] = {
            "seconds": round(wall, 1),
            **cores(cpu0, cpu1, wall),
            "operator_rss_mb": round(rss_of(op_pid) / 2**20, 1),
            "operator_rss_max_mb": round(rss_max / 2**20, 1),
            "operator_busy_runs_s": runs,
            "store_requests_per_s": round((store1 - store0) / wall, 1),
            "api_requests_per_s": request_delta(api0, api1, wall),
        }
        if mine0 is not None and mine1 is not None:
            out["operator_store_requests_per_s"] = round((mine1 - mine0) / wall, 1)
        return out

    def log_summary(self) -> dict[str, Any]:
        """The operator log's size and its warnings and errors (the first few of each kind)."""
        assert self.operator is not None
        try:
            lines = self.operator.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return {}
        problems: collections.Counter[str] = collections.Counter()
        first: dict[str, str] = {}
        for line in lines:
            level = next((lv for lv in ("ERROR", "WARNING") if lv in line), None)
            if level is None:
                continue
            # One kind per message with the object's name and numbers taken out.
            kind = re.sub(r"\d+", "N", line.split(level, 1)[1])[:120]
            problems[kind] += 1
            first.setdefault(kind, line[:300])
        return {
            "lines": len(lines),
            "problems": [{"count": n, "example": first[k]} for k, n in problems.most_common(5)],
        }

    def stop(self) -> None:
        if self.operator is not None:
            self.operator.stop()
        for hub in self.hubs:
            hub.kill()
        self.store.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--topics", type=int, default=1000)
    p.add_argument("--store", choices=["zookeeper", "etcd"], default="zookeeper")
    p.add_argument("--batch", type=int, default=250, help="Topics per kubectl create")
    p.add_argument("--parallel", type=int, default=4, help="kubectl creates at once")
    p.add_argument("--poll", type=float, default=2.0, help="seconds between lists of Topics")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for Ready")
    p.add_argument(
        "--settle",
        type=float,
        default=20.0,
        help="seconds without Topic status writes before the idle window",
    )
    p.add_argument("--settle-max", type=float, default=300.0, help="seconds of settling at most")
    p.add_argument("--idle", type=float, default=60.0, help="seconds of the idle window")
    p.add_argument("--baseline", type=float, default=15.0, help="idle seconds before creating")
    p.add_argument(
        "--status-interval",
        type=float,
        help="the operator's HEDWIG_OPERATOR_STATUS_INTERVAL_S (default: its own, 15 s)",
    )
    p.add_argument("--progress", action="store_true", help="progress on stderr")
    args = p.parse_args()
    # A SIGTERM unwinds like Ctrl-C: every process started here is stopped, the files removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    workdir = Path(tempfile.mkdtemp(prefix="hedwig-bench-operator-"))
    bench = Bench(args, workdir)
    try:
        with cluster.ControlPlane(bins=cluster.bin_dir()) as cp:
            try:
                result = bench.run(cp)
            except BaseException:
                if bench.operator is not None:
                    print(f"operator log:\n{bench.operator.tail(40)}", file=sys.stderr)
                raise
            finally:
                bench.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
