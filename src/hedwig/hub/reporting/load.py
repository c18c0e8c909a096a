"""Load reports: per-topic EWMA rates and hub totals, for the ``alive`` znode and placement.

Rates are exponentially weighted moving averages over report intervals. The weight of history
(``alpha`` is the weight of the newest interval) is deliberately lighter than Pulsar's 0.9 on
history: users saw balanced brokers keep looking overloaded for many cycles because of it.

What a report costs must not follow the number of topics a hub owns, only the number that carry
traffic: a hub may own hundreds of thousands of idle topics. So the tracker is fed the traffic
of each interval (only topics that had any: ``HubMetrics.take_traffic``), keeps rates only for
topics whose average has not decayed to nothing, and a report carries totals and the hottest
``top`` topics only, so its size is bounded too (``HubLoad``). Idle topics fill the list, in
the order the hub claimed them, when fewer than ``top`` carry traffic: a drain walks through
them report by report.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from hedwig.metadata.records import HubLoad, TopicLoad

ALPHA = 0.5
# Topics listed in a report unless the hub's configuration says otherwise.
TOP_TOPICS = 100
# A message rate below this (per second) rounds to zero in a report: the topic is idle again.
# Bytes follow messages (a topic that carries none carries no bytes), so only messages decide:
# a byte rate starts some hundred times higher and would keep an idle topic's rates, and the
# memory they hold, twice as long (75 s instead of 40 after one message of 100 bytes).
IDLE_RATE = 0.0005

# Messages in, bytes in, messages out, bytes out.
Traffic = tuple[int, int, int, int]


@dataclass(slots=True)
class _Rates:
    msg_in: float = 0.0
    bytes_in: float = 0.0
    msg_out: float = 0.0
    bytes_out: float = 0.0

    def load(self, subscribers: int = 0, backlog: int = 0) -> TopicLoad:
        return TopicLoad(
            round(self.msg_in, 3),
            round(self.bytes_in, 1),
            round(self.msg_out, 3),
            round(self.bytes_out, 1),
            subscribers,
            backlog,
        )

    @property
    def idle(self) -> bool:
        return max(self.msg_in, self.msg_out) < IDLE_RATE


@dataclass
class LoadTracker:
    alpha: float = ALPHA
    _rates: dict[str, _Rates] = field(default_factory=dict)
    _last_time: float | None = None
    _last_cpu: float | None = None
    cpu: float = 0.0

    @property
    def active(self) -> int:
        """Topics with a rate still above zero: what a report costs."""
        return len(self._rates)

    def sample(self, now: float, traffic: Mapping[str, Traffic]) -> None:
        """Fold one interval in: ``traffic`` is what each topic that had any carried in it."""
        dt = (now - self._last_time) if self._last_time is not None else 0.0
        self._last_time = now
        cpu_now = sum(os.times()[:2])
        if self._last_cpu is not None and dt > 0:
            self.cpu = self._ewma(self.cpu, (cpu_now - self._last_cpu) / dt)
        self._last_cpu = cpu_now
        if dt <= 0:
            return
        for topic in traffic.keys() - self._rates.keys():
            self._rates[topic] = _Rates()
        # The EWMA written out: this loop runs over every topic with a rate, and in a wave of
        # first publishes that is every topic claimed in the last half minute.
        new, old = self.alpha / dt, 1 - self.alpha
        quiet = (0, 0, 0, 0)
        gone = []
        for topic, rates in self._rates.items():
            mi, bi, mo, bo = traffic.get(topic, quiet)
            rates.msg_in = new * mi + old * rates.msg_in
            rates.bytes_in = new * bi + old * rates.bytes_in
            rates.msg_out = new * mo + old * rates.msg_out
            rates.bytes_out = new * bo + old * rates.bytes_out
            if rates.msg_in < IDLE_RATE and rates.msg_out < IDLE_RATE and topic not in traffic:
                gone.append(topic)
        for topic in gone:
            del self._rates[topic]

    def loads(self) -> dict[str, TopicLoad]:
        """The current rates of every topic still carrying traffic."""
        return {t: r.load() for t, r in self._rates.items()}

    def forget(self, owned: Callable[[str], bool]) -> None:
        """Drop the rates of topics that are no longer ``owned``."""
        for topic in [t for t in self._rates if not owned(t)]:
            del self._rates[topic]

    def hottest(self, top: int) -> list[str]:
        """The ``top`` busiest topics with a rate: messages in plus out, then bytes, ties
        broken by name. Ranked on the rates themselves, without making a ``TopicLoad`` of
        each (in a claim wave, every topic claimed in the last half minute has a rate)."""
        if len(self._rates) <= top:
            return list(self._rates)
        best = heapq.nsmallest(
            top,
            self._rates.items(),
            key=lambda kv: (
                -(kv[1].msg_in + kv[1].msg_out),
                -(kv[1].bytes_in + kv[1].bytes_out),
                kv[0],
            ),
        )
        return [name for name, _ in best]

    def totals(self) -> tuple[float, float, float, float]:
        """Messages and bytes in, messages and bytes out, a second, over every topic with a
        rate: one pass, where a sum of each was four (over tens of thousands in a wave)."""
        msg_in = bytes_in = msg_out = bytes_out = 0.0
        for r in self._rates.values():
            msg_in += r.msg_in
            bytes_in += r.bytes_in
            msg_out += r.msg_out
            bytes_out += r.bytes_out
        return msg_in, bytes_in, msg_out, bytes_out

    def _ewma(self, old: float, new: float) -> float:
        return self.alpha * new + (1 - self.alpha) * old

    def report(
        self,
        timestamp_ms: int,
        connections: int,
        owned: Iterable[str],
        count: int,
        top: int = TOP_TOPICS,
        extra: Callable[[str], tuple[int, int]] = lambda _topic: (0, 0),
        delivering: Mapping[str, TopicLoad] | None = None,
    ) -> HubLoad:
        """Totals over the ``count`` topics the hub owns (idle ones weigh nothing), and the
        ``top`` hottest, with ``extra`` (subscribers, backlog) looked up for those only.

        ``delivering``: fan-out topics this hub delivers for another owner. Their output
        counts in the hub's totals (it is this hub's work) but they are not listed as its
        topics (it cannot move them: their owner can)."""
        others = dict(delivering or {})
        listed = self.hottest(top)
        if len(listed) < top:
            chosen = set(listed)
            for name in owned:
                if len(listed) >= top:
                    break
                if name not in chosen:
                    listed.append(name)
        msg_in, bytes_in, msg_out, bytes_out = self.totals()
        loads: dict[str, TopicLoad] = {}
        for name in listed:
            r = self._rates.get(name, _Rates())
            loads[name] = r.load(*extra(name))
        return HubLoad(
            timestamp_ms=timestamp_ms,
            topics=count,
            connections=connections,
            cpu=round(self.cpu, 3),
            msg_in=round(msg_in, 3),
            bytes_in=round(bytes_in, 1),
            msg_out=round(msg_out + sum(t.msg_out for t in others.values()), 3),
            bytes_out=round(bytes_out + sum(t.bytes_out for t in others.values()), 1),
            topic_loads=loads,
            delivering=others,
        )
