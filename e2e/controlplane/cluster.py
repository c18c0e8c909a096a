"""A real Kubernetes control plane on loopback, for end-to-end tests.

Runs etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
(which fakes a node and moves its pods through their lifecycle, as no kubelet
runs here) as local processes, from binaries that ``build.sh`` builds from the
Go module proxy and caches outside the work tree.

Standard library only::

    from e2e.controlplane.cluster import ControlPlane

    with ControlPlane() as cp:
        cp.kubectl("get", "nodes")
        kubeconfig = cp.token_kubeconfig("hedwig", "hedwig-operator")

or by hand: ``python3 e2e/controlplane/cluster.py up``.
"""

from __future__ import annotations

import argparse
import atexit
import base64
import ctypes
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from hedwig.devcluster.zookeeper import free_port as hedwig_free_port

HERE = Path(__file__).resolve().parent
BUILD_SCRIPT = HERE / "build.sh"

#: Environment variable naming a directory of prebuilt binaries; skips build.sh.
BIN_DIR_ENV = "HEDWIG_CONTROLPLANE_BIN"
#: Set to 1 to keep the control plane's temp dir (logs, certs, etcd data).
KEEP_ENV = "HEDWIG_CONTROLPLANE_KEEP"

#: Name of the fake node that kwok manages; pods are scheduled onto it.
NODE_NAME = "kwok-node-0"
#: Annotation that tells kwok to manage a node.
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
#: Taint of the fake nodes when a real node runs beside them (pods that want a fake node
#: tolerate it).
FAKE_NODE_TAINT = {"key": KWOK_NODE_ANNOTATION, "value": "fake", "effect": "NoSchedule"}
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

_bin_dir_cache: Path | None = None


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or used."""


def bin_dir(build: bool = True) -> Path:
    """Return the directory holding the control-plane binaries.

    Uses ``$HEDWIG_CONTROLPLANE_BIN`` if set; otherwise runs ``build.sh``,
    which returns at once when the binaries are already cached and builds
    them (for many minutes, the first time) when they are not. With
    ``build=False`` a missing cache raises instead of building.
    """
    global _bin_dir_cache
    override = os.environ.get(BIN_DIR_ENV)
    if override:
        return Path(override)
    if _bin_dir_cache is not None:
        return _bin_dir_cache
    if not build:
        key = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            env={**os.environ, "HEDWIG_CONTROLPLANE_KEY": "1"},
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        root = Path(os.environ.get("HEDWIG_CACHE") or Path.home() / ".cache" / "hedwig")
        path = root / "controlplane" / key
        if not (path / ".complete").exists():
            raise ControlPlaneError(f"control-plane binaries not built: run {BUILD_SCRIPT}")
        _bin_dir_cache = path / "bin"
        return _bin_dir_cache
    proc = subprocess.run(["bash", str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{BUILD_SCRIPT} failed with exit code {proc.returncode}")
    lines = proc.stdout.strip().splitlines()
    if not lines:
        raise ControlPlaneError(f"{BUILD_SCRIPT} printed no bin directory")
    _bin_dir_cache = Path(lines[-1])
    return _bin_dir_cache


def versions(bins: Path | None = None) -> dict[str, Any]:
    """The pinned versions (kubernetes, etcd, kwok, helm) of a built bin dir."""
    bins = bins or bin_dir()
    path = bins.parent / "versions.json"
    return json.loads(path.read_text()) if path.exists() else {}


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now, from outside the ephemeral range."""
    return hedwig_free_port()


try:  # loaded here, not in the forked child, where loading could deadlock
    _LIBC: ctypes.CDLL | None = ctypes.CDLL(None, use_errno=True)
except OSError:
    _LIBC = None


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the child when the thread that started it dies.

    Keeps etcd & co. from outliving a test run that was killed (SIGKILL skips
    every cleanup). Start the control plane from a thread that outlives it
    (the main thread, as pytest fixtures do).
    """
    if _LIBC is not None:
        _LIBC.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class _Process:
    def __init__(
        self, name: str, argv: Sequence[str], workdir: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.argv = list(argv)
        self.log_path = workdir / "logs" / f"{name}.log"
        self._log = open(self.log_path, "ab")  # noqa: SIM115 (closed in stop())
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=dict(env) if env is not None else None,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.popen.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self, timeout: float = 10.0) -> None:
        if self.alive():
            try:
                self.popen.send_signal(signal.SIGTERM)
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
            except ProcessLookupError:
                pass
        self._log.close()


class ControlPlane:
    """etcd + kube-apiserver + kube-controller-manager + kube-scheduler + kwok.

    Use as a context manager (or call :meth:`start` and :meth:`stop`).
    Attributes once started:

    * ``kubeconfig``: Path of an admin kubeconfig (client cert in group
      system:masters; JSON, which every YAML reader accepts)
    * ``server``: the API server URL, ``https://127.0.0.1:<port>``
    * ``ca_file``: Path of the CA that signed the serving and client certs
    * ``bin_dir``: Path of the binaries (kubectl, helm, ...)
    * ``workdir``: Path of the temp dir: ``logs/``, ``pki/``, ``etcd/``
    * ``version``: the pinned Kubernetes version, e.g. ``"v1.36.3"``
    """

    def __init__(
        self,
        *,
        workdir: str | os.PathLike[str] | None = None,
        keep: bool | None = None,
        bins: str | os.PathLike[str] | None = None,
        startup_timeout: float = 120.0,
        nodes: int = 1,
        address: str = "127.0.0.1",
        taint_fake_nodes: bool = False,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.bin_dir = Path(bins) if bins else bin_dir()
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="hedwig-cp-"))
        self.keep = keep if keep is not None else os.environ.get(KEEP_ENV) == "1"
        self.startup_timeout = startup_timeout
        self.node_count = nodes
        # The API server's address: loopback, or a real node's address that pods can reach.
        self.address = address
        # With a real node beside them, the fake nodes take only pods that tolerate them.
        self.taint_fake_nodes = taint_fake_nodes
        # More flags for a component, by name, e.g. {"kube-apiserver": ["--feature-gates=..."]}.
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.versions = versions(self.bin_dir)
        self.version: str = self.versions.get("kubernetes", "")
        self.stage_dir = self.bin_dir.parent / "stages"
        self._processes: list[_Process] = []
        self.api_port = 0
        self.server = ""
        self.pki = self.workdir / "pki"
        self.ca_file = self.pki / "ca.crt"
        self.kubeconfig = self.workdir / "admin.kubeconfig"
        self._started = False

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> ControlPlane:
        if self._started:
            return self
        self._started = True
        atexit.register(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop(keep=True)
            raise
        return self

    def stop(self, keep: bool | None = None) -> None:
        """Stop every process (SIGTERM, then SIGKILL); remove the temp dir."""
        for proc in reversed(self._processes):
            proc.stop()
        self._processes.clear()
        keep = self.keep if keep is None else keep
        if keep:
            if self._started and self.keep:
                print(f"control plane files kept in {self.workdir}", file=sys.stderr)
        elif self._own_workdir and self.workdir.exists():
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._started = False
        atexit.unregister(self.stop)

    def _start(self) -> None:
        for sub in ("logs", "pki", "etcd", "kubeconfigs", "kwok-home"):
            (self.workdir / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
        self._make_pki()
        etcd_port, peer_port = free_port(), free_port()
        self.api_port = free_port()
        self.server = f"https://{self.address}:{self.api_port}"
        self._write_kubeconfigs()

        b = self.bin_dir
        etcd_url = f"http://127.0.0.1:{etcd_port}"
        self._spawn(
            "etcd",
            [
                b / "etcd",
                "--name=default",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
                f"--initial-cluster=default=http://127.0.0.1:{peer_port}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait(f"etcd at {etcd_url}", lambda: self._http_ok(f"{etcd_url}/health"), "etcd")

        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                b / "kube-apiserver",
                f"--etcd-servers={etcd_url}",
                f"--bind-address={self.address}",
                f"--advertise-address={self.address}",
                f"--secure-port={self.api_port}",
                f"--cert-dir={pki / 'apiserver'}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={self.ca_file}",
                # The aggregation layer's front proxy, set up as kubeadm does (it
                # also spares the controllers' logs "missing requestheader CA").
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                # How the API server authenticates to kubelets (logs, exec, port-forward).
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                "--kubelet-preferred-address-types=InternalIP,Hostname",
                f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--authorization-mode=Node,RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                "--v=1",
                *self.extra_args.get("kube-apiserver", ()),
            ],
        )
        self._wait("kube-apiserver /readyz", lambda: self._api_ok("/readyz"), "kube-apiserver")

        kc = self.workdir / "kubeconfigs"
        self._spawn(
            "kube-controller-manager",
            [
                b / "kube-controller-manager",
                f"--kubeconfig={kc / 'controller-manager.kubeconfig'}",
                f"--authentication-kubeconfig={kc / 'controller-manager.kubeconfig'}",
                f"--authorization-kubeconfig={kc / 'controller-manager.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={pki / 'controller-manager'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--cluster-signing-cert-file={self.ca_file}",
                f"--cluster-signing-key-file={pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
                "--controllers=*",
                "--use-service-account-credentials=true",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
                *self.extra_args.get("kube-controller-manager", ()),
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                b / "kube-scheduler",
                f"--kubeconfig={kc / 'scheduler.kubeconfig'}",
                f"--authentication-kubeconfig={kc / 'scheduler.kubeconfig'}",
                f"--authorization-kubeconfig={kc / 'scheduler.kubeconfig'}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={pki / 'scheduler'}",
                "--leader-elect=false",
                "--profiling=false",
                "--v=1",
            ],
        )
        stage_args = [f"--config={p}" for p in sorted(self.stage_dir.glob("*.yaml"))]
        if not stage_args:
            raise ControlPlaneError(f"no kwok stages in {self.stage_dir}")
        self._spawn(
            "kwok",
            [
                b / "kwok",
                f"--kubeconfig={kc / 'kwok.kubeconfig'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                "--cidr=10.244.0.1/16",
                "--node-ip=127.0.0.1",
                # The heartbeat stage patches node status only every ten minutes or so: a
                # node lease renewed every 10 s is what keeps the node Ready. Without one
                # the node lifecycle controller finds the node silent after its 50 s grace
                # period, marks every pod on it NotReady, and nothing marks them Ready again.
                "--node-lease-duration-seconds=40",
                f"--server-address=127.0.0.1:{free_port()}",
                *stage_args,
            ],
            env={**os.environ, "HOME": str(self.workdir / "kwok-home")},
        )

        for i in range(self.node_count):
            node = self._node_manifest(f"kwok-node-{i}")
            if self.taint_fake_nodes:
                node["spec"] = {"taints": [FAKE_NODE_TAINT]}
            self.apply(node)
        self._wait(
            "the default ServiceAccount",
            lambda: (
                self.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", check=False
                ).returncode
                == 0
            ),
            "kube-controller-manager",
        )
        self._wait(
            f"node {NODE_NAME} Ready",
            lambda: (
                self.kubectl(
                    "get",
                    "node",
                    NODE_NAME,
                    "-o",
                    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                    check=False,
                ).stdout.strip()
                == "True"
            ),
            "kwok",
        )

    # ------------------------------------------------------------------ helpers
    def _spawn(
        self, name: str, argv: Sequence[Any], env: Mapping[str, str] | None = None
    ) -> _Process:
        proc = _Process(name, [str(a) for a in argv], self.workdir, env)
        self._processes.append(proc)
        return proc

    def _process(self, name: str) -> _Process | None:
        return next((p for p in self._processes if p.name == name), None)

    def _wait(self, what: str, ready: Callable[[], bool], process: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            for proc in self._processes:
                if not proc.alive():
                    raise ControlPlaneError(
                        f"{proc.name} exited with code {proc.popen.returncode} while waiting "
                        f"for {what}; log {proc.log_path}:\n{proc.log_tail()}"
                    )
            try:
                if ready():
                    return
            except (OSError, subprocess.SubprocessError):
                pass
            time.sleep(0.25)
        waited_on = self._process(process)
        tail = f"; log {waited_on.log_path}:\n{waited_on.log_tail()}" if waited_on else ""
        raise ControlPlaneError(f"timed out after {self.startup_timeout}s waiting for {what}{tail}")

    @staticmethod
    def _http_ok(url: str) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _api_ok(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(
                self.server + path, timeout=2, context=self._ssl_context()
            ) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def api_get(self, path: str) -> Any:
        """GET ``path`` from the API server as admin; returns the decoded JSON."""
        with urllib.request.urlopen(
            self.server + path, timeout=10, context=self._ssl_context()
        ) as resp:
            return json.loads(resp.read())

    # --------------------------------------------------------------------- PKI
    def _openssl(self, *args: str) -> None:
        proc = subprocess.run(["openssl", *args], cwd=self.pki, capture_output=True, text=True)
        if proc.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")

    def _ca(self, name: str, common_name: str) -> None:
        """A self-signed CA: ``<name>.key`` and ``<name>.crt``."""
        self._openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key")
        self._openssl(
            "req",
            "-x509",
            "-new",
            "-key",
            f"{name}.key",
            "-days",
            "30",
            "-sha256",
            "-subj",
            f"/CN={common_name}",
            "-out",
            f"{name}.crt",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign,digitalSignature",
        )

    def client_certificate(self, name: str, subject: str) -> None:
        """A client certificate ``pki/<name>.crt`` (and key) signed by the cluster's CA, for
        ``subject`` (e.g. ``/O=system:nodes/CN=system:node:NAME``)."""
        self._cert(
            name,
            subject,
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n",
        )

    def serving_certificate(self, name: str, common_name: str, ips: Sequence[str]) -> None:
        """A serving certificate ``pki/<name>.crt`` for the given IP addresses."""
        sans = ",".join(f"IP:{ip}" for ip in ips)
        self._cert(
            name,
            f"/CN={common_name}",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
        )

    def certificate_kubeconfig(self, path: Path, user: str, cert: str) -> None:
        """A kubeconfig at ``path`` authenticating with the client certificate ``cert``."""
        self._cert_kubeconfig(path, user, cert)

    def _cert(self, name: str, subject: str, ext: str, ca: str = "ca") -> None:
        """An EC key and a certificate for it signed by the CA ``ca``."""
        self._openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", f"{name}.key")
        self._openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
        (self.pki / f"{name}.ext").write_text(ext)
        self._openssl(
            "x509",
            "-req",
            "-in",
            f"{name}.csr",
            "-CA",
            f"{ca}.crt",
            "-CAkey",
            f"{ca}.key",
            "-CAcreateserial",
            "-days",
            "30",
            "-sha256",
            "-extfile",
            f"{name}.ext",
            "-out",
            f"{name}.crt",
        )

    def _make_pki(self) -> None:
        self._ca("ca", "hedwig-e2e-ca")
        self._ca("front-proxy-ca", "hedwig-e2e-front-proxy-ca")
        sans = ",".join(
            [
                "IP:127.0.0.1",
                f"IP:{self.address}",
                "IP:10.96.0.1",
                "DNS:localhost",
                "DNS:kubernetes",
                "DNS:kubernetes.default",
                "DNS:kubernetes.default.svc",
                "DNS:kubernetes.default.svc.cluster.local",
            ]
        )
        self._cert(
            "apiserver",
            "/CN=kube-apiserver",
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            f"extendedKeyUsage=serverAuth\nsubjectAltName={sans}\n",
        )
        client_ext = (
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
        self._cert("admin", "/O=system:masters/CN=hedwig-admin", client_ext)
        self._cert("controller-manager", "/CN=system:kube-controller-manager", client_ext)
        self._cert("scheduler", "/CN=system:kube-scheduler", client_ext)
        self._cert("kwok", "/O=system:masters/CN=kwok", client_ext)
        self._cert(
            "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver-kubelet", client_ext
        )
        self._cert("front-proxy-client", "/CN=front-proxy-client", client_ext, "front-proxy-ca")
        # Service-account token signing key pair.
        self._openssl(
            "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key"
        )
        self._openssl("pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    # ------------------------------------------------------------- kubeconfig
    def _kubeconfig_dict(
        self, user: str, user_entry: dict[str, str], namespace: str | None = None
    ) -> dict[str, Any]:
        ca = base64.b64encode(self.ca_file.read_bytes()).decode()
        context: dict[str, str] = {"cluster": "hedwig-e2e", "user": user}
        if namespace:
            context["namespace"] = namespace
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "preferences": {},
            "clusters": [
                {
                    "name": "hedwig-e2e",
                    "cluster": {"server": self.server, "certificate-authority-data": ca},
                }
            ],
            "users": [{"name": user, "user": user_entry}],
            "contexts": [{"name": user, "context": context}],
            "current-context": user,
        }

    def _cert_kubeconfig(self, path: Path, user: str, cert: str) -> None:
        entry = {
            "client-certificate-data": base64.b64encode(
                (self.pki / f"{cert}.crt").read_bytes()
            ).decode(),
            "client-key-data": base64.b64encode((self.pki / f"{cert}.key").read_bytes()).decode(),
        }
        _write_private(path, json.dumps(self._kubeconfig_dict(user, entry), indent=2))

    def _write_kubeconfigs(self) -> None:
        kc = self.workdir / "kubeconfigs"
        self._cert_kubeconfig(self.kubeconfig, "admin", "admin")
        self._cert_kubeconfig(
            kc / "controller-manager.kubeconfig", "controller-manager", "controller-manager"
        )
        self._cert_kubeconfig(kc / "scheduler.kubeconfig", "scheduler", "scheduler")
        self._cert_kubeconfig(kc / "kwok.kubeconfig", "kwok", "kwok")

    def token_kubeconfig(
        self,
        namespace: str,
        service_account: str,
        *,
        duration: str = "2h",
        create: bool = False,
        path: str | os.PathLike[str] | None = None,
    ) -> Path:
        """Write a kubeconfig that authenticates as a ServiceAccount.

        The token comes from the TokenRequest API (``kubectl create token``),
        so it is exactly what a pod of that ServiceAccount would get. The
        context's default namespace is ``namespace``. With ``create=True`` the
        ServiceAccount (not the namespace) is created first if missing.
        Returns the path (default: ``<workdir>/kubeconfigs/sa-NS-NAME.kubeconfig``).
        """
        if (
            create
            and self.kubectl(
                "get", "serviceaccount", service_account, "-n", namespace, check=False
            ).returncode
            != 0
        ):
            self.kubectl("create", "serviceaccount", service_account, "-n", namespace)
        token = self.kubectl(
            "create", "token", service_account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()
        user = f"system:serviceaccount:{namespace}:{service_account}"
        out = (
            Path(path)
            if path
            else (self.workdir / "kubeconfigs" / f"sa-{namespace}-{service_account}.kubeconfig")
        )
        _write_private(
            out,
            json.dumps(
                self._kubeconfig_dict(user, {"token": token}, namespace=namespace), indent=2
            ),
        )
        return out

    # ---------------------------------------------------------------- clients
    def env(self, kubeconfig: str | os.PathLike[str] | None = None) -> dict[str, str]:
        """os.environ with KUBECONFIG set and the bin dir first on PATH."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(kubeconfig or self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        return env

    def kubectl(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built kubectl (as admin unless ``kubeconfig`` is given).

        Returns the CompletedProcess (text stdout/stderr); raises
        ControlPlaneError on a non-zero exit when ``check``.
        """
        return self._run(
            "kubectl",
            ["--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            check=check,
            timeout=timeout,
        )

    def helm(
        self,
        *args: str,
        input: str | None = None,
        check: bool = True,
        kubeconfig: str | os.PathLike[str] | None = None,
        timeout: float = 300.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run the built helm against this cluster (as admin unless ``kubeconfig``)."""
        return self._run(
            "helm",
            ["--kubeconfig", str(kubeconfig or self.kubeconfig), *args],
            input=input,
            check=check,
            timeout=timeout,
        )

    def _run(
        self, tool: str, args: Sequence[str], *, input: str | None, check: bool, timeout: float
    ) -> subprocess.CompletedProcess[str]:
        env = self.env()
        env.setdefault("HELM_CACHE_HOME", str(self.workdir / "helm" / "cache"))
        env.setdefault("HELM_CONFIG_HOME", str(self.workdir / "helm" / "config"))
        env.setdefault("HELM_DATA_HOME", str(self.workdir / "helm" / "data"))
        argv = [str(self.bin_dir / tool), *args]
        proc = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, env=env
        )
        if check and proc.returncode != 0:
            raise ControlPlaneError(
                f"{tool} {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}"
            )
        return proc

    def kubectl_json(self, *args: str, **kwargs: Any) -> Any:
        """``kubectl ... -o json`` decoded."""
        return json.loads(self.kubectl(*args, "-o", "json", **kwargs).stdout)

    def apply(
        self,
        manifests: Mapping[str, Any] | Iterable[Mapping[str, Any]] | str,
        *,
        namespace: str | None = None,
        server_side: bool = False,
        check: bool = True,
        kubeconfig: str | os.PathLike[str] | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f -`` of a manifest dict, a list of them, or YAML/JSON text."""
        if isinstance(manifests, str):
            text = manifests
        elif isinstance(manifests, Mapping):
            text = json.dumps(manifests)
        else:
            text = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(manifests)})
        args = ["apply", "-f", "-"]
        if namespace:
            args += ["-n", namespace]
        if server_side:
            args += ["--server-side", "--force-conflicts"]
        return self.kubectl(*args, input=text, check=check, kubeconfig=kubeconfig)

    def create_namespace(self, name: str) -> None:
        """Create a namespace and wait for its default ServiceAccount."""
        self.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        deadline = time.monotonic() + 60
        while (
            self.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode
            != 0
        ):
            if time.monotonic() > deadline:
                raise ControlPlaneError(f"no default ServiceAccount in namespace {name}")
            time.sleep(0.25)

    def logs(self) -> dict[str, Path]:
        """Log file of each process, by name."""
        return {p.name: p.log_path for p in self._processes}

    @staticmethod
    def _node_manifest(name: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {
                    "kubernetes.io/hostname": name,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "type": "kwok",
                },
            },
            "status": {
                "allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"},
            },
        }


def _write_private(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start the control plane and wait for Ctrl-C")
    up.add_argument("--keep", action="store_true", help="keep the temp dir on exit")
    up.add_argument("--nodes", type=int, default=1, help="number of fake kwok nodes")
    sub.add_parser("build", help="build (or find) the binaries and print their directory")
    args = parser.parse_args(argv)

    if args.command == "build":
        print(bin_dir())
        return 0

    stop = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    with ControlPlane(keep=args.keep or None, nodes=args.nodes) as cp:
        print(f"server={cp.server} version={cp.version} workdir={cp.workdir}", flush=True)
        print(f"export KUBECONFIG={cp.kubeconfig} PATH={cp.bin_dir}:$PATH", flush=True)
        print(f"READY kubeconfig={cp.kubeconfig}", flush=True)
        while not stop:
            for proc in cp._processes:
                if not proc.alive():
                    print(
                        f"{proc.name} exited; log {proc.log_path}:\n{proc.log_tail()}",
                        file=sys.stderr,
                    )
                    return 1
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
