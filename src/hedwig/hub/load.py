"""Load reports: per-topic EWMA rates and hub totals, for the ``alive`` znode and placement.

Rates are exponentially weighted moving averages over report intervals. The weight of history
(``alpha`` is the weight of the newest interval) is deliberately lighter than Pulsar's 0.9 on
history: users saw balanced brokers keep looking overloaded for many cycles because of it.

A report carries totals over every topic and the loads of the hottest ``top`` topics only, so
its size is bounded whatever the number of topics (``HubLoad``).
"""

from __future__ import annotations

import heapq
import os
from dataclasses import dataclass, field

from hedwig.metadata.records import HubLoad, TopicLoad

ALPHA = 0.5
# Topics listed in a report unless the hub's configuration says otherwise.
TOP_TOPICS = 100


def hottest(topics: dict[str, TopicLoad], top: int) -> dict[str, TopicLoad]:
    """The ``top`` busiest topics (messages in plus out, then bytes, then backlog), ties broken
    by name so that idle topics are listed in a stable order (a drain walks through them)."""
    if len(topics) <= top:
        return dict(topics)
    best = heapq.nsmallest(
        top,
        topics.items(),
        key=lambda kv: (
            -(kv[1].msg_in + kv[1].msg_out),
            -(kv[1].bytes_in + kv[1].bytes_out),
            -kv[1].backlog,
            kv[0],
        ),
    )
    return dict(best)


@dataclass
class _Counters:
    msg_in: int = 0
    bytes_in: int = 0
    msg_out: int = 0
    bytes_out: int = 0


@dataclass
class _Rates:
    msg_in: float = 0.0
    bytes_in: float = 0.0
    msg_out: float = 0.0
    bytes_out: float = 0.0


@dataclass
class LoadTracker:
    alpha: float = ALPHA
    _last: dict[str, _Counters] = field(default_factory=dict)
    _rates: dict[str, _Rates] = field(default_factory=dict)
    _last_time: float | None = None
    _last_cpu: float | None = None
    cpu: float = 0.0

    def sample(
        self,
        now: float,
        counters: dict[str, tuple[int, int, int, int]],
        extra: dict[str, tuple[int, int]],
    ) -> dict[str, TopicLoad]:
        """Fold one interval in; ``counters`` are cumulative (in, bytes in, out, bytes out)."""
        dt = (now - self._last_time) if self._last_time is not None else 0.0
        self._last_time = now
        cpu_now = sum(os.times()[:2])
        if self._last_cpu is not None and dt > 0:
            self.cpu = self._ewma(self.cpu, (cpu_now - self._last_cpu) / dt)
        self._last_cpu = cpu_now
        out: dict[str, TopicLoad] = {}
        for topic, (mi, bi, mo, bo) in counters.items():
            last = self._last.get(topic)
            rates = self._rates.setdefault(topic, _Rates())
            if last is not None and dt > 0:
                rates.msg_in = self._ewma(rates.msg_in, (mi - last.msg_in) / dt)
                rates.bytes_in = self._ewma(rates.bytes_in, (bi - last.bytes_in) / dt)
                rates.msg_out = self._ewma(rates.msg_out, (mo - last.msg_out) / dt)
                rates.bytes_out = self._ewma(rates.bytes_out, (bo - last.bytes_out) / dt)
            self._last[topic] = _Counters(mi, bi, mo, bo)
            subs, backlog = extra.get(topic, (0, 0))
            out[topic] = TopicLoad(
                round(rates.msg_in, 3),
                round(rates.bytes_in, 1),
                round(rates.msg_out, 3),
                round(rates.bytes_out, 1),
                subs,
                backlog,
            )
        for gone in set(self._last) - set(counters):
            del self._last[gone]
            self._rates.pop(gone, None)
        return out

    def _ewma(self, old: float, new: float) -> float:
        return self.alpha * new + (1 - self.alpha) * old

    def report(
        self,
        timestamp_ms: int,
        connections: int,
        topics: dict[str, TopicLoad],
        top: int = TOP_TOPICS,
    ) -> HubLoad:
        """Totals over all ``topics``, and the loads of the ``top`` hottest of them."""
        return HubLoad(
            timestamp_ms=timestamp_ms,
            topics=len(topics),
            connections=connections,
            cpu=round(self.cpu, 3),
            msg_in=round(sum(t.msg_in for t in topics.values()), 3),
            bytes_in=round(sum(t.bytes_in for t in topics.values()), 1),
            msg_out=round(sum(t.msg_out for t in topics.values()), 3),
            bytes_out=round(sum(t.bytes_out for t in topics.values()), 1),
            topic_loads=hottest(topics, top),
        )
