"""What a real node changes on the host, and how it is undone.

A kubelet, containerd, the CNI plugins and kube-proxy change the machine they run on, not only
their own directories (checked on this machine, /work/shared/notes/real-pods.md):

- iptables chains in the host's tables: ``KUBE-FIREWALL``, ``KUBE-KUBELET-CANARY``,
  ``KUBE-IPTABLES-HINT`` (kubelet), ``KUBE-SERVICES``, ``KUBE-SVC-*``... (kube-proxy),
  ``CNI-HOSTPORT-*`` (portmap), and the rules in the built-in chains that jump to them;
- sysctls: ``net.ipv4.ip_forward`` (the bridge plugin), ``vm.overcommit_memory``,
  ``kernel.panic``... (the kubelet sets what it considers the right kernel defaults),
  ``net.ipv4.conf.all.route_localnet`` (kube-proxy);
- directories outside its root dir: ``/var/lib/kubelet/{device-plugins,pki}``,
  ``/var/log/containers``, ``/var/log/pods``, ``/var/lib/cni``, ``/etc/cni``,
  ``/run/containerd``...;
- cgroups under its cgroup root in every hierarchy, mounts under its directories, the bridge
  and the pods' veths on it.

``HostState.capture()`` records what is there before the node starts; ``undo(before)`` removes
exactly what was added (never what was there before, so a second run finds the machine as the
first found it), and ``diff(before)`` says what still differs, for the tests to assert on.
Standard library only; the iptables work goes through ``iptables-save``/``iptables-restore``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Chains a node may add, by prefix; rules jumping to them are removed with them.
CHAIN_PREFIXES = ("KUBE-", "CNI-")
IPTABLES = ("iptables", "ip6tables")
BUILTIN_CHAINS = ("INPUT", "OUTPUT", "FORWARD", "PREROUTING", "POSTROUTING")

#: Sysctls the node's components may set (kubelet's kernel defaults, the bridge plugin,
#: kube-proxy); restored to their values from before.
SYSCTLS = (
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.forwarding",
    "net.ipv4.conf.all.route_localnet",
    "net.ipv6.conf.all.forwarding",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)

#: Paths the node's components create outside the directories they are given.
PATHS = (
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/var/lib/cni",
    "/etc/cni",
    "/opt/cni",
    "/run/containerd",
    "/var/run/netns",
    "/run/netns",
    "/var/lib/containerd",
    "/opt/containerd",
)

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def iptables_chains(tool: str) -> dict[str, set[str]]:
    """The chains of each table (``iptables-save``), or nothing when the tool is missing."""
    try:
        out = subprocess.run(
            [f"{tool}-save"], capture_output=True, text=True, check=False, timeout=30
        ).stdout
    except FileNotFoundError:
        return {}
    chains: dict[str, set[str]] = {}
    table = ""
    for line in out.splitlines():
        if line.startswith("*"):
            table = line[1:]
            chains[table] = set()
        elif line.startswith(":") and table:
            chains[table].add(line[1:].split()[0])
    return chains


def _ours(chain: str) -> bool:
    return chain.startswith(CHAIN_PREFIXES)


def remove_node_chains(tool: str, keep: dict[str, set[str]]) -> None:
    """Delete the node's chains (those with our prefixes that were not there before) and every
    rule that jumps to them, one ``iptables-restore --noflush`` transaction per table."""
    try:
        saved = subprocess.run(
            [f"{tool}-save"], capture_output=True, text=True, check=False, timeout=30
        ).stdout
    except FileNotFoundError:
        return
    table = ""
    script: dict[str, list[str]] = {}
    added: dict[str, list[str]] = {}
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:]
            script[table], added[table] = [], []
        elif line.startswith(":") and table:
            chain = line[1:].split()[0]
            if _ours(chain) and chain not in keep.get(table, set()):
                added[table].append(chain)
    for line in saved.splitlines():
        if line.startswith("*"):
            table = line[1:]
        elif line.startswith("-A ") and table:
            words = line.split()
            chain = words[1]
            targets = {words[i + 1] for i, w in enumerate(words[:-1]) if w in ("-j", "-g")}
            if chain not in added[table] and targets & set(added[table]):
                script[table].append("-D" + line[2:])
    for table, chains in added.items():
        if not chains and not script[table]:
            continue
        lines = [f"*{table}", *script[table]]
        lines += [f"-F {c}" for c in chains]
        lines += [f"-X {c}" for c in chains]
        lines.append("COMMIT")
        subprocess.run(
            [f"{tool}-restore", "--noflush"],
            input="\n".join(lines) + "\n",
            capture_output=True,
            text=True,
            check=False,
            timeout=30,
        )


def cgroup_dirs(name: str) -> list[Path]:
    """``name`` (a top-level cgroup) in every hierarchy where it exists."""
    if not CGROUP_ROOT.is_dir():
        return []
    return [p / name for p in CGROUP_ROOT.iterdir() if (p / name).is_dir()]


def remove_cgroup(name: str) -> None:
    """rmdir a cgroup tree, deepest first, in every hierarchy (its processes must be gone)."""
    for top in cgroup_dirs(name):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: -len(w[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


def mounts_under(prefix: Path) -> list[str]:
    """Mount points under ``prefix``, deepest first."""
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    root = str(prefix).rstrip("/") + "/"
    for line in lines:
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(root) or point == root.rstrip("/"):
            found.append(point)
    return sorted(set(found), key=len, reverse=True)


def unmount_under(prefix: Path) -> None:
    for point in mounts_under(prefix):
        if subprocess.run(["umount", point], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def bridge_and_ports(bridge: str) -> list[str]:
    """The bridge and the links attached to it (the pods' host-side veths)."""
    net = Path("/sys/class/net")
    ports = [p.name for p in net.iterdir() if (p / "master").resolve().name == bridge]
    return [*ports, bridge] if (net / bridge).exists() else ports


@dataclass
class HostState:
    """A snapshot of what a node may change on the host."""

    sysctls: dict[str, str | None]
    paths: dict[str, bool]
    chains: dict[str, dict[str, set[str]]]
    bridge: list[str]
    bridge_name: str
    cgroup_root: str

    @classmethod
    def capture(cls, bridge: str, cgroup_root: str) -> HostState:
        return cls(
            sysctls={s: _read(_sysctl_path(s)) for s in SYSCTLS},
            paths={p: os.path.lexists(p) for p in PATHS},
            chains={tool: iptables_chains(tool) for tool in IPTABLES},
            bridge=bridge_and_ports(bridge),
            bridge_name=bridge,
            cgroup_root=cgroup_root,
        )

    def undo(self, workdir: Path) -> None:
        """Put back what the node changed since this snapshot was taken."""
        unmount_under(workdir)
        for path, existed in self.paths.items():
            if not existed and os.path.lexists(path):
                unmount_under(Path(path))
                shutil.rmtree(path, ignore_errors=True)
        for tool, chains in self.chains.items():
            remove_node_chains(tool, chains)
        if not self.bridge:
            for name in bridge_and_ports(self.bridge_name):
                subprocess.run(["ip", "link", "delete", name], capture_output=True, check=False)
        remove_cgroup(self.cgroup_root.strip("/"))
        for name, value in self.sysctls.items():
            if value is not None and _read(_sysctl_path(name)) != value:
                with contextlib.suppress(OSError):
                    _sysctl_path(name).write_text(value)

    def save(self, path: Path) -> None:
        """Keep the snapshot on disk, so a run that was killed can still be undone by the next."""
        data = {
            "sysctls": self.sysctls,
            "paths": self.paths,
            "chains": {t: {k: sorted(v) for k, v in c.items()} for t, c in self.chains.items()},
            "bridge": self.bridge,
            "bridge_name": self.bridge_name,
            "cgroup_root": self.cgroup_root,
        }
        path.write_text(json.dumps(data))

    @classmethod
    def load(cls, path: Path) -> HostState:
        data = json.loads(path.read_text())
        return cls(
            sysctls=data["sysctls"],
            paths=data["paths"],
            chains={t: {k: set(v) for k, v in c.items()} for t, c in data["chains"].items()},
            bridge=data["bridge"],
            bridge_name=data["bridge_name"],
            cgroup_root=data["cgroup_root"],
        )

    def diff(self, before: HostState) -> list[str]:
        """What differs from ``before`` (empty when the host is as it was)."""
        out = []
        for name, value in before.sysctls.items():
            if self.sysctls.get(name) != value:
                out.append(f"sysctl {name}: {value} -> {self.sysctls.get(name)}")
        for path, existed in before.paths.items():
            if self.paths.get(path) != existed:
                out.append(f"path {path}: existed {existed} -> {self.paths.get(path)}")
        for tool, tables in self.chains.items():
            for table, chains in tables.items():
                # A table iptables-nft made on first use keeps its empty built-in chains
                # (policy ACCEPT, no rules: they change nothing).
                extra = {c for c in chains if c not in BUILTIN_CHAINS} - before.chains.get(
                    tool, {}
                ).get(table, set())
                if extra:
                    out.append(f"{tool} {table}: new chains {sorted(extra)}")
        if self.bridge != before.bridge:
            out.append(f"bridge {before.bridge_name}: {before.bridge} -> {self.bridge}")
        if cgroup_dirs(before.cgroup_root.strip("/")):
            out.append(f"cgroup {before.cgroup_root} left in {cgroup_dirs(before.cgroup_root)}")
        return out
