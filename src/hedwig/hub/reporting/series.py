"""Metric series per namespace, bounded whatever the number of namespaces (as the per-topic
series of ``hedwig.hub.reporting.metrics`` are): what the hub exports per namespace."""

from __future__ import annotations

from prometheus_client import Counter


class NamespaceSeries:
    """A counter per namespace, bounded: the first ``limit`` namespaces counted get a series of
    their own, every other one is counted in the series without a label (``""``), so the sum
    is still the hub's total."""

    def __init__(self, counter: Counter, limit: int) -> None:
        self._counter = counter
        self._limit = limit
        self._children: dict[str, Counter] = {"": counter.labels("")}

    def __call__(self, namespace: str, amount: float) -> None:
        child = self._children.get(namespace)
        if child is None:
            if len(self._children) > self._limit:
                child = self._children[""]
            else:
                child = self._children[namespace] = self._counter.labels(namespace)
        child.inc(amount)
