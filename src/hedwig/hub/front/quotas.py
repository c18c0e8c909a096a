"""Publish rate quotas per namespace, enforced by back-pressure: publishes wait, none is refused.

A namespace's policy may cap the messages and payload bytes a second published to its topics
(``NamespacePolicy.max_publish_msgs_per_s``, ``max_publish_bytes_per_s``; 0: no limit), over
every hub that serves them. Kafka's client quotas are the model (KIP-13, KIP-219): the hub
measures the rate over a window and, when a publish takes it over the limit, computes how long
the namespace must wait for its average to come back to the limit, and holds its next publishes
for that long. Nothing is dropped or refused; a client's window of unacknowledged publishes
then fills and the client itself slows down.

The rules:

1. **Meter** (``RateMeter``): messages and bytes published per ``BUCKET_S`` bucket, kept for
   ``WINDOW_S``. The observed rate O is the sum of the live buckets over the time they span
   (from the oldest live bucket's start to now, at least one bucket, at most the window).
2. **Throttle time** (Kafka's ``(O - T) / T * W``, with W the span): ``X = (sum - T * W) / T``
   for the limit T, the longer of the message and byte limits' X; 0 within both. Kafka
   measures over at least the whole window, which lets a fresh client burst ten windows'
   worth; measuring over the time the buckets span instead paces a namespace from its first
   publish, and keeps every window's sum within T * W (the last publish's batch over at most).
3. **Hold** (``PublishQuotas.admit``): a publish to a namespace held waits, in arrival order
   (one lock per namespace, taken only while the namespace is held), until the hold ends; it is
   then counted, and if the count takes the namespace over its limit, the namespace is held for
   X, capped at ``MAX_THROTTLE_S`` but never below what the publish's own batch is worth at the
   limit (a batch of five seconds' worth holds five seconds: large batches do not slip past;
   the cap only ends a hold after a quota was lowered or its share shrank). A namespace not
   held costs no wait: a look-up and the count. Other namespaces on the same hub and
   connection are not held.
4. **Share across hubs** (``PublishQuotas.share``): each hub enforces the namespace's limits
   divided by the number of hubs serving its publishes now, itself included: the hubs whose
   fresh load report (``HubLoad.namespaces``) lists the namespace, plus this one. The hubs
   report what they admitted per limited namespace at every load report (the busiest
   ``top`` namespaces), and read each other's reports then (``observe``). How far it overshoots,
   and for how long, is in ``docs/architecture.md`` (tenants).
5. **Changes** apply at once: the limits are read from the namespace's policy (watched by the
   hub: ``hedwig.hub.owning.namespaces``) at every publish.

Throttled time is reported per namespace (``throttled``: the metric
``hedwig_namespace_throttled_seconds``). Hand-written: the meter is twenty lines, and the
throttle follows Kafka's formula, which no rate-limiting library computes (they refuse or
sleep per call, not hold a namespace's publishes in order).
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from hedwig.clock import Clock
from hedwig.metadata.records import HubStatus
from hedwig.metadata.records.namespaces import NamespacePolicy
from hedwig.protocol.names import lane_of, namespace_of

# The meter's window, and its buckets: a rate is measured over the last second, to 2 %.
WINDOW_S = 1.0
BUCKET_S = 0.02
# The longest one hold lasts (Kafka caps its throttle at the quota window too).
MAX_THROTTLE_S = 1.0


class RateMeter:
    """Messages and bytes counted per bucket over a sliding window (rule 1)."""

    def __init__(self, *, window_s: float = WINDOW_S, bucket_s: float = BUCKET_S) -> None:
        self.window_s = window_s
        self.bucket_s = bucket_s
        # [bucket start, messages, bytes], oldest first.
        self._buckets: deque[list[float]] = deque()
        self._msgs = 0.0
        self._bytes = 0.0

    def record(self, now: float, msgs: int, size: int) -> None:
        self._expire(now)
        start = math.floor(now / self.bucket_s) * self.bucket_s
        if self._buckets and self._buckets[-1][0] == start:
            b = self._buckets[-1]
            b[1] += msgs
            b[2] += size
        else:
            self._buckets.append([start, float(msgs), float(size)])
        self._msgs += msgs
        self._bytes += size

    def span(self, now: float) -> float:
        """The time the live buckets span (at least one bucket, at most the window)."""
        self._expire(now)
        oldest = self._buckets[0][0] if self._buckets else now
        return min(self.window_s, max(self.bucket_s, now - oldest))

    def rates(self, now: float) -> tuple[float, float]:
        """Messages and bytes a second over the window."""
        span = self.span(now)
        return self._msgs / span, self._bytes / span

    def throttle_s(self, now: float, msgs_limit: float, bytes_limit: float) -> float:
        """How long to hold (rule 2): 0 within both limits (a limit of 0 is none)."""
        span = self.span(now)
        hold = 0.0
        for total, limit in ((self._msgs, msgs_limit), (self._bytes, bytes_limit)):
            if limit > 0 and total > limit * span:
                hold = max(hold, (total - limit * span) / limit)
        return hold

    def _expire(self, now: float) -> None:
        horizon = now - self.window_s
        b = self._buckets
        while b and b[0][0] + self.bucket_s <= horizon:
            _, m, s = b.popleft()
            self._msgs -= m
            self._bytes -= s
        if not b:
            self._msgs = self._bytes = 0.0


@dataclass
class _Namespace:
    meter: RateMeter = field(default_factory=RateMeter)
    held_until: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    # Admitted since the last load report: messages, bytes.
    msgs: int = 0
    bytes: int = 0


class PublishQuotas:
    """The hub's holds of publishes per namespace (the module docstring's rules 3 to 5)."""

    def __init__(
        self,
        *,
        policy_of: Callable[[str], NamespacePolicy | None],
        clock: Clock,
        throttled: Callable[[str, float], None] = lambda _ns, _s: None,
        max_throttle_s: float = MAX_THROTTLE_S,
    ) -> None:
        self._policy_of = policy_of
        self._clock = clock
        self._throttled = throttled
        self.max_throttle_s = max_throttle_s
        self._namespaces: dict[str, _Namespace] = {}
        # Other hubs serving each namespace's publishes now, as their reports said.
        self._others: dict[str, int] = {}
        self._reported_at = clock.monotonic()

    def share(self, namespace: str, policy: NamespacePolicy) -> tuple[float, float]:
        """This hub's part of the namespace's limits (rule 4)."""
        msgs, size = policy.publish_limits
        hubs = 1 + self._others.get(namespace, 0)
        return msgs / hubs, size / hubs

    async def admit(self, topic: str, msgs: int, size: int) -> None:
        """Count a publish of ``msgs`` messages (``size`` bytes) to ``topic``, after holding it
        while its namespace is held."""
        policy = self._policy_of(topic)
        if policy is None or policy.publish_limits == (0, 0):
            return
        name = "/".join(namespace_of(lane_of(topic)[0]))
        ns = self._namespaces.get(name)
        if ns is None:
            ns = self._namespaces[name] = _Namespace()
        clock = self._clock
        if ns.lock.locked() or clock.monotonic() < ns.held_until:
            started = clock.monotonic()  # (the wait for the lock is part of the hold)
            async with ns.lock:
                while (now := clock.monotonic()) < ns.held_until:
                    await clock.sleep(ns.held_until - now)
                self._count(topic, name, ns, msgs, size, now)
            self._throttled(name, now - started)
            return
        self._count(topic, name, ns, msgs, size, clock.monotonic())

    def _count(
        self, topic: str, name: str, ns: _Namespace, msgs: int, size: int, now: float
    ) -> None:
        # The policy again: it may have changed while the publish waited.
        policy = self._policy_of(topic)
        ns.meter.record(now, msgs, size)
        ns.msgs += msgs
        ns.bytes += size
        if policy is None:
            return
        limits = self.share(name, policy)
        hold = ns.meter.throttle_s(now, *limits)
        if hold > 0:
            # Capped, but never below what this publish itself is worth at the limits: a
            # batch of five seconds' worth holds five seconds, or batches would slip past.
            own = max(n / limit for n, limit in zip((msgs, size), limits, strict=True) if limit)
            ns.held_until = now + min(hold, max(self.max_throttle_s, own))

    def take_usage(self, top: int) -> dict[str, tuple[float, float]]:
        """Messages and bytes a second admitted per limited namespace since the last call, for
        the ``top`` busiest that admitted any (what a load report carries: rule 4)."""
        now = self._clock.monotonic()
        elapsed = max(now - self._reported_at, 1e-3)
        self._reported_at = now
        used = {n: (ns.msgs, ns.bytes) for n, ns in self._namespaces.items() if ns.msgs}
        for ns in self._namespaces.values():
            ns.msgs = ns.bytes = 0
        # Namespaces quiet for a whole window and not held are forgotten (bounded memory).
        for n in [
            n
            for n, ns in self._namespaces.items()
            if n not in used and not ns.lock.locked() and ns.meter.span(now) <= ns.meter.bucket_s
        ]:
            del self._namespaces[n]
        best = sorted(used.items(), key=lambda kv: (-kv[1][0], -kv[1][1], kv[0]))[:top]
        return {n: (round(m / elapsed, 3), round(b / elapsed, 1)) for n, (m, b) in best}

    def observe(self, hubs: list[HubStatus], me: str, now_ms: int, max_age_ms: int) -> None:
        """The other hubs serving each namespace, from their load reports (alive, written at
        most ``max_age_ms`` ago, listing the namespace)."""
        others: dict[str, int] = {}
        for h in hubs:
            load = h.load
            if h.address == me or not h.alive or load is None:
                continue
            if now_ms - load.timestamp_ms > max_age_ms:
                continue
            for name in load.namespaces:
                others[name] = others.get(name, 0) + 1
        self._others = others

    @property
    def sharing(self) -> Mapping[str, int]:
        """Hubs serving each namespace besides this one, as last observed."""
        return self._others
