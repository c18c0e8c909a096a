"""A network lab of namespaces: one per hub, ZooKeeper and client, joined by one bridge.

Layout (``<id>`` is ``hwl`` plus six random hex digits, unique to one lab)::

    host  --veth <id>-- | switch namespace <id>-sw: bridge <id>br | --veth-- node <id>-hub0
    (10.a.b.1, the        |                                      | --veth-- node <id>-hub1
     controller)          |                                      | --veth-- node <id>-zk ...

The bridge lives in a namespace of its own rather than on the host, for two reasons: the host
runs other bridges and firewall chains (a Kubernetes node's ``cni0``, ``KUBE-*``) whose
``br_netfilter`` rules would otherwise see and judge the lab's bridged traffic, and deleting the
lab's namespaces removes every interface the lab made, even after a crash. The only thing the lab
puts in the host's namespace is one veth end (``<id>``) with the first address of the lab's
/24: the test process, its helpers and ZooKeeper queries reach every node through it, and the
nodes have no route anywhere else, so no lab traffic leaves the machine.

Partitions (``partitions.py``) are ``iptables`` rules in the receiving nodes' namespaces, so
senders see a silent network (a DROP on the sender's OUTPUT would fail its ``connect`` at once
with EPERM, which no real partition does). The controller's address is never cut.

A lab registers itself under ``/run/hedwig-lab/<id>`` with its owner's process id; ``sweep``
removes the labs whose owner is gone (a test run killed mid-way), so parallel runs never
remove each other's.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.devcluster.hosts import Host

PREFIX = "hwl"
REGISTRY = Path("/run/hedwig-lab")
# Candidate /24s: 10.200.0.0/24 .. 10.239.255.0/24, checked against every host address and
# route (and so against other labs, whose controller link is a host route).
_FIRST, _LAST = 200, 239


class LabUnavailable(Exception):
    """The machine cannot host the lab (no root, no namespaces, no ``ip``/``iptables``)."""


def run(*args: str, check: bool = True, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout)


def in_ns(ns: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run("ip", "netns", "exec", ns, *args, check=check)


def unavailable_reason() -> str | None:
    """Why the lab cannot run here, or None. Tries a throwaway namespace."""
    if os.geteuid() != 0:
        return "the network lab needs root (network namespaces, iptables)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"the network lab needs {tool!r} (iproute2, iptables)"
    probe = f"{PREFIX}probe{secrets.token_hex(3)}"
    try:
        made = run("ip", "netns", "add", probe, check=False)
        if made.returncode != 0:
            return f"network namespaces are forbidden here: {made.stderr.strip()}"
        rules = in_ns(probe, "iptables", "-S", check=False)
        if rules.returncode != 0:
            return f"iptables does not work in a network namespace: {rules.stderr.strip()}"
    finally:
        run("ip", "netns", "del", probe, check=False)
    return None


@dataclass
class Node:
    """One namespace on the lab's bridge: a hub, ZooKeeper, a client or a relay."""

    name: str
    ns: str
    ip: str

    @property
    def host(self) -> Host:
        """Where DevCluster starts a process in this node."""
        return Host(address=self.ip, launch=("ip", "netns", "exec", self.ns))

    def exec(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return in_ns(self.ns, *args, check=check)

    def iptables(self, *args: str, table: str = "filter") -> None:
        self.exec("iptables", "-w", "-t", table, *args)


@dataclass
class Lab:
    """The namespaces, bridge and links of one lab; ``close`` (or the context) removes them."""

    id: str = field(default_factory=lambda: PREFIX + secrets.token_hex(3))
    subnet: ipaddress.IPv4Network | None = None
    nodes: dict[str, Node] = field(default_factory=dict)
    _next_host: int = 2
    _relays: int = 0

    @property
    def switch(self) -> str:
        return f"{self.id}-sw"

    @property
    def controller_ip(self) -> str:
        """The host's address in the lab: never partitioned."""
        assert self.subnet is not None
        return str(self.subnet.network_address + 1)

    def start(self) -> Lab:
        REGISTRY.mkdir(parents=True, exist_ok=True)
        # One lab at a time picks its /24 and makes its controller link, so two runs started
        # together cannot both take the same free subnet.
        with open(REGISTRY / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.subnet = free_subnet()
            (REGISTRY / self.id).write_text(
                json.dumps({"pid": os.getpid(), "subnet": str(self.subnet)})
            )
            try:
                self._make_switch()
            except BaseException:
                self.close()
                raise
        return self

    def _make_switch(self) -> None:
        sw, br = self.switch, f"{self.id}br"
        run("ip", "netns", "add", sw)
        in_ns(sw, "ip", "link", "set", "lo", "up")
        in_ns(sw, "ip", "link", "add", br, "type", "bridge")
        in_ns(sw, "ip", "link", "set", br, "up")
        # The controller's link: one end on the host, the other on the bridge.
        run("ip", "link", "add", self.id, "type", "veth", "peer", "name", "ctl", "netns", sw)
        in_ns(sw, "ip", "link", "set", "ctl", "master", br, "up")
        run("ip", "addr", "add", f"{self.controller_ip}/24", "dev", self.id)
        run("ip", "link", "set", self.id, "up")

    def add_node(self, name: str) -> Node:
        """A new namespace on the bridge with the next address of the lab's /24."""
        assert self.subnet is not None
        if name in self.nodes:
            return self.nodes[name]
        ns = f"{self.id}-{name}"
        ip = str(self.subnet.network_address + self._next_host)
        self._next_host += 1
        port = f"p{len(self.nodes)}"
        run("ip", "netns", "add", ns)
        node = Node(name, ns, ip)
        self.nodes[name] = node
        node.exec("ip", "link", "set", "lo", "up")
        in_ns(self.switch, "ip", "link", "add", port, "type", "veth", "peer", "name", "eth0",
              "netns", ns)  # fmt: skip
        in_ns(self.switch, "ip", "link", "set", port, "master", f"{self.id}br", "up")
        node.exec("ip", "addr", "add", f"{ip}/24", "dev", "eth0")
        node.exec("ip", "link", "set", "eth0", "up")
        # The partition chains: every cut is a rule in them, a heal flushes them.
        for chain, hook in (("HWL-IN", "INPUT"), ("HWL-OUT", "OUTPUT")):
            node.iptables("-N", chain)
            node.iptables("-A", hook, "-j", chain)
        node.iptables("-N", "HWL-NAT", table="nat")
        node.iptables("-A", "OUTPUT", "-j", "HWL-NAT", table="nat")
        return node

    def next_relay_port(self) -> int:
        """A port number offset unique in this lab, for the next relay."""
        self._relays += 1
        return self._relays

    def node(self, name: str) -> Node:
        return self.nodes[name]

    def node_at(self, ip: str) -> Node:
        for n in self.nodes.values():
            if n.ip == ip:
                return n
        raise KeyError(ip)

    def close(self) -> None:
        remove_lab(self.id)

    def __enter__(self) -> Lab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def free_subnet() -> ipaddress.IPv4Network:
    """A /24 that overlaps no address or route of the host (checked, then picked at random)."""
    used: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for line in run("ip", "-4", "-o", "addr", "show").stdout.splitlines():
        parts = line.split()
        if "inet" in parts:
            used.append(ipaddress.ip_interface(parts[parts.index("inet") + 1]).network)
    for line in run("ip", "-4", "route", "show", "table", "all").stdout.splitlines():
        dest = line.split()[0] if line.split() else ""
        if dest in ("default", "broadcast", "local", "unreachable", "blackhole", "prohibit"):
            dest = line.split()[1] if len(line.split()) > 1 else ""
        with contextlib.suppress(ValueError):
            net = ipaddress.ip_network(dest, strict=False)
            if net.prefixlen > 0:
                used.append(net)
    for entry in REGISTRY.glob(f"{PREFIX}*"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            used.append(ipaddress.ip_network(json.loads(entry.read_text())["subnet"]))
    for _ in range(200):
        candidate = ipaddress.IPv4Network(
            f"10.{_FIRST + secrets.randbelow(_LAST - _FIRST + 1)}.{secrets.randbelow(256)}.0/24"
        )
        if not any(candidate.overlaps(u) for u in used):
            return candidate
    raise LabUnavailable("no free /24 in 10.200.0.0-10.239.255.255 for the lab")


def lab_namespaces(lab_id: str) -> list[str]:
    out = run("ip", "netns", "list", check=False).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    return [n for n in names if n.startswith(lab_id + "-")]


def remove_lab(lab_id: str) -> None:
    """Kill every process in the lab's namespaces, delete them and the controller link.

    Processes are found by namespace (``ip netns pids``): they are the lab's own (hubs,
    ZooKeeper, workloads, relays), killed by process id."""
    from tests.failure.lab.disk import remove_disks

    namespaces = lab_namespaces(lab_id)
    for ns in namespaces:
        for pid in run("ip", "netns", "pids", ns, check=False).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGCONT)  # a frozen process cannot die otherwise
                os.kill(int(pid), signal.SIGKILL)
    for ns in namespaces:
        for _ in range(50):
            if not run("ip", "netns", "pids", ns, check=False).stdout.split():
                break
            subprocess.run(["sleep", "0.1"], check=False)
        run("ip", "netns", "del", ns, check=False)
    # Its peer went with the switch namespace; delete it anyway if it is still there.
    run("ip", "link", "del", lab_id, check=False)
    remove_disks(lab_id)
    with contextlib.suppress(FileNotFoundError):
        (REGISTRY / lab_id).unlink()


def sweep() -> list[str]:
    """Remove the labs left by runs that died (their owner process is gone); their ids."""
    ids = {n.split("-")[0] for n in _all_namespaces() if n.startswith(PREFIX)}
    if REGISTRY.is_dir():
        ids |= {p.name.split("-")[0] for p in REGISTRY.glob(f"{PREFIX}*")}
    ids |= {
        line.split(":")[1].strip().split("@")[0]
        for line in run("ip", "-o", "link", "show", check=False).stdout.splitlines()
        if line.split(":")[1].strip().startswith(PREFIX)
    }
    removed = []
    for lab_id in sorted(ids):
        if _owner_alive(lab_id):
            continue
        remove_lab(lab_id)
        removed.append(lab_id)
    return removed


def _all_namespaces() -> Iterator[str]:
    out = run("ip", "netns", "list", check=False).stdout
    return (line.split()[0] for line in out.splitlines() if line.strip())


def _owner_alive(lab_id: str) -> bool:
    try:
        pid = int(json.loads((REGISTRY / lab_id).read_text())["pid"])
    except (OSError, ValueError, KeyError):
        return False
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
