"""A real node for the e2e control plane: containerd + runc, a kubelet, kube-proxy, CoreDNS.

``RealCluster`` starts, on this machine and as local processes:

- a bridge ``hedwig-br0`` with the node's address 10.245.0.1/24 (pods get 10.245.0.2-254 from
  the CNI bridge plugin with host-local IPAM); the API server listens on that address, so pods
  reach it through the ``kubernetes`` Service and the host through the same address;
- the control plane (``cluster.ControlPlane``) with its kwok node tainted, so only pods that
  tolerate the taint land on the fake node;
- containerd (Debian's, with runc) with a private root, state and socket, its CRI section set
  for this machine (``restrict_oom_score_adj``: root lacks CAP_SYS_RESOURCE here), the pause
  image built by ``build-node.sh`` and the images given imported with ``ctr``;
- a kubelet registered as ``hedwig-node-0`` with a node client certificate
  (``system:node:hedwig-node-0`` in ``system:nodes``), cgroupfs under the cgroup
  ``/hedwig-e2e``, no swap or cgroup v1 refusal;
- kube-proxy (iptables mode, masquerading service traffic so replies on the bridge come back
  through the host) and CoreDNS answering ``cluster.local`` behind the ``kube-dns`` Service
  (10.96.0.10), which the kubelet gives pods as their DNS server.

Everything it starts it stops, and ``host.HostState`` undoes what the components change on the
host (iptables chains, sysctls, the bridge, cgroups, mounts, ``/var/lib/kubelet``...). One
real node runs on a machine at a time: a host-wide lock serialises test runs, and a run that
finds the leftovers of one that was killed clears them first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import cluster
from .host import CHAIN_PREFIXES, HostState, bridge_and_ports, remove_cgroup, unmount_under

HERE = Path(__file__).resolve().parent
BUILD_NODE = HERE / "build-node.sh"

NODE_NAME = "hedwig-node-0"
BRIDGE = "hedwig-br0"
NODE_IP = "10.245.0.1"
POD_SUBNET = "10.245.0.0/24"
CLUSTER_DNS = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"
CGROUP_ROOT = "/hedwig-e2e"
LOCK_FILE = Path("/run/lock/hedwig-e2e-node.lock")
#: The host as it was before the running node started (for a run killed before undoing it).
STATE_FILE = Path("/run/lock/hedwig-e2e-node.host.json")


class NodeError(cluster.ControlPlaneError):
    """The real node could not be built, started or used."""


_running: list[RealCluster] = []


def running_here() -> bool:
    """Whether this process runs a real node now (a second would wait for itself)."""
    return bool(_running)


def node_dir(build: bool = True) -> Path:
    """The cache directory of the node's binaries (``build-node.sh``; minutes the first
    time). With ``build=False`` a missing cache raises instead of building."""
    env = dict(os.environ)
    if not build:
        env["HEDWIG_NODE_NO_BUILD"] = "1"
    proc = subprocess.run(["bash", str(BUILD_NODE)], stdout=subprocess.PIPE, text=True, env=env)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise NodeError(f"{BUILD_NODE} failed (exit {proc.returncode})")
    return Path(lines[-1])


def _wait(what: str, check: Any, timeout: float, procs: Sequence[Any] = ()) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if not p.alive():
                raise NodeError(f"{p.name} exited while waiting for {what}:\n{p.log_tail()}")
        try:
            if check():
                return
        except (OSError, subprocess.SubprocessError, cluster.ControlPlaneError):
            pass
        time.sleep(0.3)
    raise NodeError(f"timed out after {timeout}s waiting for {what}")


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


class RealCluster:
    """The control plane plus one real node; a context manager.

    ``images`` are docker-archive tars (``images/build.sh``) imported into the node's
    containerd at start; ``load_image`` imports more later. Attributes once started: ``cp``
    (the ControlPlane), ``node_ip``, ``node_name``, ``workdir`` (the node's files, logs in
    ``cp.workdir/logs``), ``host_before`` (the host as it was, for checks).
    """

    def __init__(self, images: Sequence[Path] = (), *, lock_timeout: float = 1800.0) -> None:
        self.images = list(images)
        self.lock_timeout = lock_timeout
        self.bins = node_dir()
        self.node_name = NODE_NAME
        self.node_ip = NODE_IP
        self.cp: cluster.ControlPlane | None = None
        self.workdir = Path()
        self.host_before: HostState | None = None
        self._lock: Any = None
        self._procs: list[Any] = []
        self.socket = Path()
        self.dns_port = 0

    # --------------------------------------------------------------------- lifecycle
    def __enter__(self) -> RealCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> RealCluster:
        if _running:
            raise NodeError("this process already runs a real node")
        self._take_lock()
        _running.append(self)
        try:
            _clear_leftovers()
            self.host_before = HostState.capture(BRIDGE, CGROUP_ROOT)
            self.host_before.save(STATE_FILE)
            _run("ip", "link", "add", BRIDGE, "type", "bridge")
            _run("ip", "addr", "add", f"{NODE_IP}/24", "dev", BRIDGE)
            _run("ip", "link", "set", BRIDGE, "up")
            # Host-originated traffic to Service IPs leaves by the bridge, from the node's IP.
            _run(
                "ip",
                "route",
                "add",
                cluster.SERVICE_CLUSTER_IP_RANGE,
                "dev",
                BRIDGE,
                "src",
                NODE_IP,
            )
            _make_cgroup(CGROUP_ROOT)
            self.cp = cluster.ControlPlane(address=NODE_IP, taint_fake_nodes=True)
            self.cp.start()
            self.workdir = self.cp.workdir / "node"
            self._start_node()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        cp = self.cp
        if cp is not None and self._procs:
            self._drain(cp)
        self._stop_node()
        keep = cp.keep if cp is not None else False
        if cp is not None:
            cp.stop(keep=True)  # its files go after the host is undone (mounts live there)
        if self.host_before is not None:
            self.host_before.undo(self.workdir)
            STATE_FILE.unlink(missing_ok=True)
        if cp is not None and not keep:
            shutil.rmtree(cp.workdir, ignore_errors=True)
        self.cp = None
        self._release_lock()

    def _take_lock(self) -> None:
        LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
        self._lock = open(LOCK_FILE, "w")  # noqa: SIM115 (closed in _release_lock)
        deadline = time.monotonic() + self.lock_timeout
        while True:
            try:
                fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise NodeError(f"another real node holds {LOCK_FILE}") from None
                time.sleep(1)

    def _release_lock(self) -> None:
        if self in _running:
            _running.remove(self)
        if self._lock is not None:
            fcntl.flock(self._lock, fcntl.LOCK_UN)
            self._lock.close()
            self._lock = None

    # ---------------------------------------------------------------------- starting
    def _spawn(self, name: str, argv: Sequence[Any], env: dict[str, str] | None = None) -> Any:
        assert self.cp is not None
        proc = cluster._Process(name, [str(a) for a in argv], self.cp.workdir, env)
        self._procs.append(proc)
        return proc

    def _start_node(self) -> None:
        cp = self.cp
        assert cp is not None
        w = self.workdir
        for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs", "coredns"):
            (w / sub).mkdir(parents=True, exist_ok=True)
        cp.client_certificate("node", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
        cp.client_certificate("kube-proxy", "/CN=system:kube-proxy")
        cp.client_certificate("coredns", "/O=system:masters/CN=coredns")
        for name in ("node", "kube-proxy", "coredns"):
            cp.certificate_kubeconfig(w / f"{name}.kubeconfig", name, name)

        self.socket = w / "containerd" / "containerd.sock"
        (w / "containerd" / "config.toml").write_text(self._containerd_config())
        (w / "cni" / "net.d" / "10-hedwig.conflist").write_text(json.dumps(self._cni_config()))
        containerd = self._spawn(
            "containerd", ["containerd", "--config", w / "containerd" / "config.toml"]
        )
        _wait("containerd's socket", lambda: self.ctr("version").returncode == 0, 60, [containerd])
        for tar in [self.bins / "images" / "pause.tar", *self.images]:
            self.load_image(tar)

        (w / "kubelet" / "config.yaml").write_text(json.dumps(self._kubelet_config()))
        kubelet = self._spawn(
            "kubelet",
            [
                self.bins / "bin" / "kubelet",
                f"--config={w / 'kubelet' / 'config.yaml'}",
                f"--kubeconfig={w / 'node.kubeconfig'}",
                f"--root-dir={w / 'kubelet'}",
                f"--cert-dir={w / 'kubelet' / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
        )
        (w / "kube-proxy.yaml").write_text(json.dumps(self._kube_proxy_config()))
        self._spawn(
            "kube-proxy",
            [self.bins / "bin" / "kube-proxy", f"--config={w / 'kube-proxy.yaml'}", "--v=1"],
        )
        self._start_coredns()
        _wait(
            f"node {NODE_NAME} Ready",
            lambda: (
                cp.kubectl(
                    "get",
                    "node",
                    NODE_NAME,
                    "-o",
                    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                    check=False,
                ).stdout.strip()
                == "True"
            ),
            120,
            [kubelet],
        )

    def ctr(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        """``ctr`` against the node's containerd, in Kubernetes' namespace."""
        return subprocess.run(
            ["ctr", "--address", str(self.socket), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def load_image(self, tar: Path) -> None:
        """Import a docker-archive tar into the node's containerd (as a registry pull would)."""
        proc = self.ctr("images", "import", str(tar))
        if proc.returncode != 0:
            raise NodeError(f"ctr images import {tar} failed:\n{proc.stderr}")

    def tag_image(self, source: str, target: str) -> None:
        """A second name for an image already on the node (``ctr images tag``)."""
        proc = self.ctr("images", "tag", "--force", _full_ref(source), _full_ref(target))
        if proc.returncode != 0:
            raise NodeError(f"ctr images tag failed:\n{proc.stderr}")

    def _containerd_config(self) -> str:
        w = self.workdir / "containerd"
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        return f"""version = 2
root = "{w / "root"}"
state = "{w / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]
[grpc]
  address = "{self.socket}"
[ttrpc]
  address = "{w / "ttrpc.sock"}"
[{cri}]
  sandbox_image = "localhost/pause:{self.cp.version if self.cp else ""}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  stream_server_address = "127.0.0.1"
  [{cri}.containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
  [{cri}.cni]
    bin_dir = "{self.bins / "cni"}"
    conf_dir = "{self.workdir / "cni" / "net.d"}"
[plugins."io.containerd.internal.v1.opt"]
  path = "{w / "opt"}"
"""

    def _cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "hedwig-e2e",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_SUBNET, "gateway": NODE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.workdir / "cni" / "ipam"),
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        }

    def _kubelet_config(self) -> dict[str, Any]:
        assert self.cp is not None
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": cluster.free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": cluster.free_port(),
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.cp.ca_file)},
            },
            "authorization": {"mode": "Webhook"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "cgroupRoot": CGROUP_ROOT,
            # This machine: cgroups v1 only, and swap is whatever the host has.
            "failCgroupV1": False,
            "failSwapOn": False,
            "clusterDomain": CLUSTER_DOMAIN,
            "clusterDNS": [CLUSTER_DNS],
            # No host resolv.conf: pods search only the cluster's domains.
            "resolvConf": "",
            "podLogsDir": str(self.workdir / "pod-logs"),
            "maxPods": 60,
            "serializeImagePulls": False,
            # A shared test machine: never evict for disk or memory, never collect images.
            "evictionHard": {
                "memory.available": "1Mi",
                "nodefs.available": "1%",
                "nodefs.inodesFree": "1%",
                "imagefs.available": "1%",
            },
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "imageMinimumGCAge": "24h",
            "rotateCertificates": False,
            "serverTLSBootstrap": False,
            "shutdownGracePeriod": "0s",
            "nodeStatusUpdateFrequency": "2s",
            "syncFrequency": "5s",
        }

    def _kube_proxy_config(self) -> dict[str, Any]:
        return {
            "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
            "kind": "KubeProxyConfiguration",
            "clientConnection": {"kubeconfig": str(self.workdir / "kube-proxy.kubeconfig")},
            "hostnameOverride": NODE_NAME,
            "mode": "iptables",
            "bindAddress": NODE_IP,
            "clusterCIDR": POD_SUBNET,
            "healthzBindAddress": f"127.0.0.1:{cluster.free_port()}",
            "metricsBindAddress": f"127.0.0.1:{cluster.free_port()}",
            # Zero: leave the host's conntrack settings alone.
            "conntrack": {
                "maxPerCore": 0,
                "min": 0,
                "tcpEstablishedTimeout": "0s",
                "tcpCloseWaitTimeout": "0s",
            },
            # Masquerade Service traffic, so a pod's reply to another pod on the bridge goes
            # back through the host, which undoes the DNAT. NodePorts only on the node's IP.
            "iptables": {"masqueradeAll": True, "localhostNodePorts": False, "syncPeriod": "5s"},
            "nodePortAddresses": [f"{NODE_IP}/32"],
        }

    def _start_coredns(self) -> None:
        assert self.cp is not None
        w = self.workdir / "coredns"
        self.dns_port = cluster.free_port()
        kubeconfig = self.workdir / "coredns.kubeconfig"
        (w / "Corefile").write_text(
            f"""{CLUSTER_DOMAIN}:{self.dns_port} in-addr.arpa:{self.dns_port} {{
    bind {NODE_IP}
    errors
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa {{
        kubeconfig {kubeconfig}
        pods insecure
        ttl 5
    }}
}}
.:{self.dns_port} {{
    bind {NODE_IP}
    template ANY ANY {{
        rcode NXDOMAIN
    }}
}}
"""
        )
        proc = self._spawn("coredns", [self.bins / "bin" / "coredns", "-conf", w / "Corefile"])
        _wait("CoreDNS", lambda: _port_open(NODE_IP, self.dns_port), 60, [proc])
        self.cp.apply(
            [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {
                        "name": "kube-dns",
                        "namespace": "kube-system",
                        "labels": {"k8s-app": "kube-dns"},
                    },
                    "spec": {
                        "clusterIP": CLUSTER_DNS,
                        "ports": [
                            {"name": "dns", "port": 53, "protocol": "UDP"},
                            {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                        ],
                    },
                },
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "kube-dns-node",
                        "namespace": "kube-system",
                        "labels": {
                            "kubernetes.io/service-name": "kube-dns",
                            "endpointslice.kubernetes.io/managed-by": "hedwig-e2e",
                        },
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [NODE_IP], "conditions": {"ready": True}}],
                    "ports": [
                        {"name": "dns", "port": self.dns_port, "protocol": "UDP"},
                        {"name": "dns-tcp", "port": self.dns_port, "protocol": "TCP"},
                    ],
                },
            ]
        )

    # ---------------------------------------------------------------------- stopping
    def _drain(self, cp: cluster.ControlPlane) -> None:
        """Stop every pod through the kubelet, so each sandbox's network is torn down by CNI."""
        cp.kubectl("cordon", NODE_NAME, check=False)
        cp.kubectl(
            "delete",
            "pods",
            "--all-namespaces",
            f"--field-selector=spec.nodeName={NODE_NAME}",
            "--grace-period=0",
            "--force",
            "--wait=false",
            check=False,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            tasks = self.ctr("tasks", "list", "--quiet", timeout=30)
            if tasks.returncode != 0 or not self._running_tasks():
                return
            time.sleep(0.5)

    def _running_tasks(self) -> list[str]:
        out = self.ctr("tasks", "list", timeout=30).stdout.splitlines()[1:]
        return [line.split()[0] for line in out if line.split() and "RUNNING" in line]

    def _stop_node(self) -> None:
        by_name = {p.name: p for p in self._procs}
        for name in ("coredns", "kube-proxy", "kubelet"):
            if name in by_name:
                by_name[name].stop()
        if "containerd" in by_name and by_name["containerd"].alive():
            for task in self._running_tasks():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task, timeout=30)
            time.sleep(0.5)
            for line in self.ctr("tasks", "list", timeout=30).stdout.splitlines()[1:]:
                if line.split():
                    self.ctr("tasks", "delete", "--force", line.split()[0], timeout=30)
            by_name["containerd"].stop()
        _kill_cgroup_processes(CGROUP_ROOT)
        if self.socket != Path():
            _kill_shims(str(self.socket))
        if self.workdir != Path():
            unmount_under(self.workdir)
        self._procs.clear()


def _full_ref(ref: str) -> str:
    """containerd names images by their full reference (docker.io/library/NAME:TAG)."""
    name = ref.split("/")[0]
    if "/" not in ref:
        return f"docker.io/library/{ref}"
    if "." in name or ":" in name or name == "localhost":
        return ref
    return f"docker.io/{ref}"


def _run(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise NodeError(f"{' '.join(argv)} failed: {proc.stderr}")


def _make_cgroup(cgroup: str) -> None:
    """The kubelet's cgroup root must exist in every hierarchy (cgroups v1 here); a new
    cpuset cgroup starts with no CPUs or memory nodes, so it gets its parent's."""
    for hierarchy in Path("/sys/fs/cgroup").iterdir():
        if hierarchy.name == "unified" or not (hierarchy / "cgroup.procs").exists():
            continue
        path = hierarchy / cgroup.strip("/")
        path.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            if (path / name).exists() and not (path / name).read_text().strip():
                (path / name).write_text((hierarchy / name).read_text())


def _pids_in(cgroup: str) -> set[int]:
    pids: set[int] = set()
    top = Path("/sys/fs/cgroup/pids") / cgroup.strip("/")
    if not top.is_dir():
        return pids
    for dirpath, _dirs, files in os.walk(top):
        if "cgroup.procs" in files:
            text = (Path(dirpath) / "cgroup.procs").read_text()
            pids |= {int(x) for x in text.split()}
    return pids


def _kill_cgroup_processes(cgroup: str) -> None:
    """SIGKILL what still runs in the node's cgroup tree (containers the runtime left)."""
    for _ in range(20):
        pids = _pids_in(cgroup)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def _kill_shims(socket_path: str) -> None:
    """containerd's shims outlive it: stop the ones serving our containerd."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and socket_path.encode() in argv:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)


def _clear_leftovers() -> None:
    """What a killed run left behind (we hold the lock, so no node runs now)."""
    _kill_cgroup_processes(CGROUP_ROOT)
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0") if proc.name.isdigit() else []
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and b"/hedwig-cp-" in b" ".join(argv)
        ):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGKILL)
    for tmp in Path("/tmp").glob("hedwig-cp-*/node"):
        unmount_under(tmp)
    if STATE_FILE.exists():
        # What the killed run found: undo back to it (sysctls included).
        HostState.load(STATE_FILE).undo(Path("/nonexistent"))
        STATE_FILE.unlink()
    remove_cgroup(CGROUP_ROOT)
    if bridge_and_ports(BRIDGE):
        from .host import iptables_chains, remove_node_chains

        for tool in ("iptables", "ip6tables"):
            stale = {
                t: {c for c in cs if not c.startswith(CHAIN_PREFIXES)}
                for t, cs in iptables_chains(tool).items()
            }
            remove_node_chains(tool, stale)
        for name in bridge_and_ports(BRIDGE):
            subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
