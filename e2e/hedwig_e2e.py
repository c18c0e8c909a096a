"""Helpers of the operator's end-to-end tests: the operator process, waiting, ZooKeeper reads,
and a publish/subscribe workload that keeps count of every acknowledged message.

Pods never run here (kwok fakes them), so hubs are local ``hedwig hub`` processes registered in
the pool's region of a local ZooKeeper; the operator is a local process too, authenticated
with a ServiceAccount token bound to ``operator/deploy/rbac.yaml``.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from controlplane import cluster
from hedwig.client import HedwigClient
from hedwig.devcluster import processes
from hedwig.metadata import HubInfo, TopicConfig, open_store
from hedwig.metadata.records.namespaces import NamespacePolicy

ROOT = Path(__file__).resolve().parents[1]
CRDS = ROOT / "crds"
RBAC = ROOT / "operator" / "deploy" / "rbac.yaml"

T = TypeVar("T")

# The storage class of the static volumes the tests create (no provisioner runs here).
STORAGE_CLASS = "e2e-static"


def control_plane_bins() -> Path:
    """The cached control-plane binaries. Built first with HEDWIG_CONTROLPLANE_BUILD=1 (``make
    test`` builds them before pytest); otherwise the tests are skipped when they are missing."""
    try:
        return cluster.bin_dir(build=os.environ.get("HEDWIG_CONTROLPLANE_BUILD") == "1")
    except cluster.ControlPlaneError as exc:
        pytest.skip(f"{exc} (about 10 minutes the first time)")


def static_volume(name: str, path: Path, size: str) -> dict[str, Any]:
    """A PersistentVolume on the local disk, for a volume claim to bind to."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path)},
        },
    }


def wait_for(
    what: str, check: Callable[[], T | None], timeout: float = 60.0, interval: float = 0.5
) -> T:
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


def rbac_manifests(namespace: str) -> list[dict[str, Any]]:
    """The shipped RBAC, moved to ``namespace``."""
    docs = [d for d in yaml.safe_load_all(RBAC.read_text()) if d]
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if "namespace" in doc["metadata"]:
            doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        out.append(doc)
    return out


def crd_manifests() -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]


def install_operator_access(cp: cluster.ControlPlane, namespace: str) -> Path:
    """The shipped CRDs (waited for until established) and the operator's RBAC in
    ``namespace``, as the chart installs them: the kubeconfig of the operator's
    ServiceAccount, for an operator run as a local process."""
    crds = crd_manifests()
    cp.apply(crds)
    names = [f"crd/{c['metadata']['name']}" for c in crds]
    cp.kubectl("wait", "--for=condition=Established", "--timeout=60s", *names)
    cp.apply(rbac_manifests(namespace))
    return cp.token_kubeconfig(namespace, "hedwig-operator")


# cert-manager's own CRDs, from its Go module (the Go module cache keeps them after the first
# download). Its controller cannot be built here: its command is a module of its own that
# the module proxy does not serve, so tests issue as its CA issuer would.
CERT_MANAGER_MODULE = "github.com/cert-manager/cert-manager@v1.21.2"
CERT_MANAGER_CRDS = ("certificates", "certificaterequests", "issuers", "clusterissuers")


def cert_manager_crds() -> list[dict[str, Any]]:
    out = subprocess.run(
        ["go", "mod", "download", "-json", CERT_MANAGER_MODULE],
        cwd=tempfile.gettempdir(),  # outside any module of this repository
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    root = Path(json.loads(out.stdout)["Dir"]) / "deploy" / "crds"
    return [
        yaml.safe_load((root / f"cert-manager.io_{name}.yaml").read_text())
        for name in CERT_MANAGER_CRDS
    ]


class OperatorProcess:
    """``python -m hedwig_operator -n NS`` with a kubeconfig; logs to ``log_path``."""

    def __init__(
        self,
        namespace: str,
        env: Mapping[str, str],
        log_path: Path,
        liveness_port: int,
        settings: Mapping[str, str],
        *,
        verbose: bool = True,
    ) -> None:
        """``verbose``: kopf's debug log, which tests read; a benchmark runs the operator as
        its Deployment does, without it (a cost of its own per event)."""
        self.namespace = namespace
        self.verbose = verbose
        self.log_path = log_path
        self.liveness = f"http://127.0.0.1:{liveness_port}/healthz"
        self.env = {**env, **settings}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed below, the child keeps its copy
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hedwig_operator",
                "-n",
                self.namespace,
                "--liveness",
                self.liveness,
                *(["--verbose"] if self.verbose else []),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
        )
        log.close()

        def alive() -> bool:
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"the operator exited:\n{self.tail()}")
            try:
                with urllib.request.urlopen(self.liveness, timeout=1) as r:
                    return bool(r.status == 200)
            except OSError:
                return False

        wait_for("the operator's liveness endpoint", alive, timeout)
        return self

    def tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        processes.end(self.proc, grace_s=20)
        self.proc = None


# ---------------------------------------------------------------------------- ZooKeeper


async def _with_store(zk: str, region: str, fn: Callable[[Any], Any]) -> Any:
    store = open_store(zk, region=region)
    await store.start()
    try:
        return await fn(store)
    finally:
        await store.close()


def topic_config(zk: str, region: str, topic: str) -> TopicConfig | None:
    async def read(store: Any) -> TopicConfig | None:
        got = await store.topics.read_topic_config(topic)
        return got.value if got is not None else None

    return asyncio.run(_with_store(zk, region, read))  # type: ignore[no-any-return]


def topic_owner(zk: str, region: str, topic: str) -> HubInfo | None:
    async def read(store: Any) -> HubInfo | None:
        got = await store.ownership.read_owner_info(topic)
        return got.value if got is not None else None

    return asyncio.run(_with_store(zk, region, read))  # type: ignore[no-any-return]


def namespace_policy(zk: str, region: str, name: str) -> NamespacePolicy | None:
    async def read(store: Any) -> NamespacePolicy | None:
        got = await store.namespaces.read_namespace(name)
        return got.value if got is not None else None

    return asyncio.run(_with_store(zk, region, read))  # type: ignore[no-any-return]


def publish_each(hubs: list[str], topics: list[str]) -> dict[str, Exception | None]:
    """Publish one message to each topic (creating it), in order, through ``hubs``: what each
    publish raised, None if it was acknowledged."""

    async def run() -> dict[str, Exception | None]:
        out: dict[str, Exception | None] = {}
        async with HedwigClient(hubs) as client:
            for topic in topics:
                try:
                    await client.publish(topic, b"m")
                    out[topic] = None
                except Exception as exc:  # recorded for the test to look at
                    out[topic] = exc
        return out

    return asyncio.run(run())


def topic_exists(zk: str, region: str, topic: str) -> bool:
    return bool(asyncio.run(_with_store(zk, region, lambda s: s.topics.topic_exists(topic))))


# ----------------------------------------------------------------------------- Workload


class Workload:
    """Publishers and subscribers on some topics, in a thread with its own event loop (so
    the test's blocking kubectl calls never stall them). Every acknowledged message is
    remembered; ``stop`` waits for the subscribers to have received every one of them."""

    def __init__(
        self, hubs: list[str], topics: list[str], rate_per_topic: float, *, subscribers: int = 1
    ) -> None:
        self.hubs = hubs
        self.topics = topics
        self.interval = 1.0 / rate_per_topic
        self.acked: dict[str, set[bytes]] = {t: set() for t in topics}
        # What each subscriber of each topic received (``received``: the first's).
        self.names = ["e2e-reader"] + [f"e2e-reader-{i}" for i in range(1, subscribers)]
        self.received_by: dict[tuple[str, str], set[bytes]] = {
            (t, n): set() for t in topics for n in self.names
        }
        self.received: dict[str, set[bytes]] = {
            t: self.received_by[(t, "e2e-reader")] for t in topics
        }
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._subscribed = threading.Event()
        self._thread = threading.Thread(target=self._main, name="workload", daemon=True)
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self, timeout: float = 60.0) -> Workload:
        self._thread.start()
        if not self._subscribed.wait(timeout):
            raise AssertionError(f"subscribing timed out; errors: {self.errors}")
        return self

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        async with HedwigClient(self.hubs) as client:
            subs = [(t, n, await client.subscribe(t, n)) for t in self.topics for n in self.names]
            self._subscribed.set()
            readers = [asyncio.create_task(self._read(t, n, s)) for t, n, s in subs]
            writers = [asyncio.create_task(self._write(client, t)) for t in self.topics]
            while not self._stop.is_set():  # noqa: ASYNC110 - set from another thread
                await asyncio.sleep(0.1)  # a look at a flag of another thread, not a wait
            for w in writers:
                w.cancel()
            await asyncio.gather(*writers, return_exceptions=True)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and any(  # noqa: ASYNC110
                not self.acked[t] <= got for (t, _), got in self.received_by.items()
            ):
                await asyncio.sleep(0.2)  # polled until the deadline above
            for r in readers:
                r.cancel()
            await asyncio.gather(*readers, return_exceptions=True)

    async def _write(self, client: HedwigClient, topic: str) -> None:
        n = 0
        while True:
            n += 1
            value = f"{topic}-{n}".encode()
            try:
                await client.publish(topic, value)
                self.acked[topic].add(value)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a failed publish is not acknowledged: fine to lose
                self.errors.append(f"publish {topic}: {exc!r}")
            await asyncio.sleep(self.interval)

    async def _read(self, topic: str, name: str, sub: Any) -> None:
        got = self.received_by[(topic, name)]
        while True:
            try:
                msg = await sub.next(timeout=5)
            except asyncio.CancelledError:
                raise
            except Exception:
                continue
            got.add(msg.value)
            sub.consume(msg)

    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values())

    def stop(self) -> dict[str, set[bytes]]:
        """Stop publishing; return, per topic, acknowledged messages some subscriber of it
        never received."""
        self._stop.set()
        self._thread.join(120)
        missing: dict[str, set[bytes]] = {t: set() for t in self.topics}
        for (t, _), got in self.received_by.items():
            missing[t] |= self.acked[t] - got
        return missing
