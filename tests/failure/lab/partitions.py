"""Partitions between lab nodes: ``iptables`` DROP rules in the receivers' namespaces.

A cut between A and B drops, in A, what comes from B and, in B, what comes from A; a one-way
cut from A to B drops only, in B, what comes from A (B's packets still reach A, so TCP
connections stall rather than fail). Rules go in the ``HWL-IN`` chain each node was given, so
``heal`` flushes them all at once; each ``Partition`` can also be undone alone. The lab's
controller address is never cut: the test keeps watching ZooKeeper and the hubs through it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from tests.failure.lab.netns import Lab, Node


@dataclass
class Partition:
    """Some DROP rules that together make one fault; ``undo`` deletes exactly them."""

    description: str
    rules: list[tuple[Node, tuple[str, ...]]] = field(default_factory=list)
    active: bool = True

    def undo(self) -> None:
        if not self.active:
            return
        for node, rule in reversed(self.rules):
            node.exec("iptables", "-w", "-D", *rule, check=False)
        self.active = False


def _drop_from(receiver: Node, sender: Node) -> tuple[Node, tuple[str, ...]]:
    rule = ("HWL-IN", "-s", sender.ip, "-j", "DROP")
    receiver.iptables("-A", *rule)
    return receiver, rule


def one_way(src: Node, dst: Node) -> Partition:
    """Packets from ``src`` no longer reach ``dst``; ``dst``'s still reach ``src``."""
    return Partition(f"{src.name} -> {dst.name} dropped", [_drop_from(dst, src)])


def cut(a: Node, others: Iterable[Node]) -> Partition:
    """``a`` and each of ``others`` no longer hear each other (both ways)."""
    others = list(others)
    part = Partition(f"{a.name} <-/-> {', '.join(o.name for o in others)}")
    for other in others:
        part.rules.append(_drop_from(a, other))
        part.rules.append(_drop_from(other, a))
    return part


def isolate(lab: Lab, a: Node) -> Partition:
    """``a`` is cut from every other node (not from the controller)."""
    part = cut(a, [n for n in lab.nodes.values() if n is not a])
    part.description = f"{a.name} isolated"
    return part


def heal(lab: Lab) -> None:
    """Every partition and slow-link rule of the lab, gone."""
    for node in lab.nodes.values():
        node.exec("iptables", "-w", "-F", "HWL-IN", check=False)
        node.exec("iptables", "-w", "-t", "nat", "-F", "HWL-NAT", check=False)
