"""A workload that records everything it saw, and the checker of that history.

Publishers publish numbered messages (``<publisher>:<n>``) to a few topics and record every
acknowledgement (topic, value, sequence id). Senders (``senders``) queue numbered messages
with ``send``, which gives no acknowledgement per message, and flush every few: a flush that
raises nothing acknowledges every message sent before it (at a place the log shows). Subscribers
record every delivery. After the faults, the whole log of each topic is read back and the
history is checked:

1. every acknowledged message is in the log exactly once, at the sequence id its
   acknowledgement gave;
2. each publisher's messages are in the log in the order they were published, and its
   acknowledgements came back in that order; a sender's flushed messages are in the log
   exactly once, in the order they were sent;
3. the log holds nothing that was not published, and nothing twice;
4. each subscriber received every message of the log in log order: redeliveries (after a
   reconnect) are allowed, gaps never.

A topic served by lanes is checked lane by lane: each lane is a log of its own (the history
is keyed by the lane's topic, ``lane_name``), acknowledgements name their lane, and every
subscriber of the topic must have received every lane, each in its order. There is no order
across lanes to check.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from hedwig.client import HedwigClient, PublishResult, RetryPolicy
from hedwig.errors import HedwigError
from hedwig.net import Network
from hedwig.protocol import lane_name, lane_of
from hedwig.security import ClientSecurity

log = logging.getLogger(__name__)


@dataclass
class History:
    acked: dict[str, list[tuple[bytes, int]]] = field(default_factory=lambda: defaultdict(list))
    failed: int = 0
    delivered: dict[tuple[str, str], list[tuple[int, bytes]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    log: dict[str, list[tuple[int, bytes]]] = field(default_factory=dict)
    ack_times: list[float] = field(default_factory=list)
    # When each topic's acknowledgements came: the longest gap is how long publishing to that
    # topic stalled (during a failover or a hand-off).
    topic_ack_times: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    # A subscriber that gave up (its iterator raised): what it raised, so a check that finds
    # it behind says why rather than only where it stopped.
    subscriber_errors: dict[tuple[str, str], str] = field(default_factory=dict)
    # Per topic, its subscribers' names: each must have received each of its lanes.
    subscribers: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))
    # Per topic, the messages senders queued with ``send`` and a flush then acknowledged, in
    # the order each sender sent them (no sequence id: ``send`` reports none).
    flushed: dict[str, list[bytes]] = field(default_factory=lambda: defaultdict(list))

    @property
    def acked_count(self) -> int:
        return sum(len(v) for v in self.acked.values()) + sum(len(v) for v in self.flushed.values())


class Workload:
    def __init__(
        self,
        hubs: list[str],
        topics: list[str],
        *,
        publishers: int = 3,
        subscribers: int = 2,
        senders: int = 0,
        rate: float = 200.0,
        retry_deadline_s: float = 60.0,
        security: ClientSecurity | None = None,
        network: Network | None = None,
        keys: int = 0,
        delay_every: int = 0,
        delay_s: float = 0.0,
        prefix: str = "pub",
    ) -> None:
        self.hubs = hubs
        # Every ``delay_every``-th message of a publisher (0: none) asks to be delivered
        # ``delay_s`` after its publish (``deliver_after``).
        self.delay_every = delay_every
        self.delay_s = delay_s
        # Publishers are ``<prefix><n>`` and their messages ``<prefix><n>:<i>``: workloads in
        # linked regions each keep a prefix of their own (it must start with "pub").
        self.prefix = prefix
        # Messages carry one of ``keys`` keys (``k<n % keys>``; 0: no key), for key-shared
        # subscriptions' per-key order.
        self.keys = keys
        self.security = security
        # None: each client's own (TCP, with TLS when ``security`` asks for it).
        self.network = network
        self.topics = topics
        self.publishers = publishers
        self.subscribers = subscribers
        self.senders = senders
        self.rate = rate
        self.retry = RetryPolicy(deadline_s=retry_deadline_s)
        self.history = History()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._clients: list[HedwigClient] = []

    async def start(self) -> None:
        for s in range(self.subscribers):
            client = HedwigClient(
                self.hubs, retry=self.retry, security=self.security, network=self.network
            )
            self._clients.append(client)
            for topic in self.topics:
                sub = await client.subscribe(topic, f"checker-{s}", message_window=500)
                self.history.subscribers[topic].append(f"checker-{s}")
                self._tasks.append(asyncio.create_task(self._drain(topic, f"checker-{s}", sub)))
        for p in range(self.publishers):
            client = self._publishing_client(f"{self.prefix}{p}")
            self._tasks.append(asyncio.create_task(self._publish(p, client)))
        for p in range(self.senders):
            client = self._publishing_client(f"send{p}")
            self._tasks.append(asyncio.create_task(self._send(p, client)))

    def _publishing_client(self, publisher_id: str) -> HedwigClient:
        client = HedwigClient(
            self.hubs,
            retry=self.retry,
            publisher_id=publisher_id,
            security=self.security,
            network=self.network,
        )
        self._clients.append(client)
        return client

    async def _publish(self, p: int, client: HedwigClient) -> None:
        n = 0
        interval = 1.0 / self.rate
        pending: list[asyncio.Task[None]] = []
        while not self._stop.is_set():
            topic = self.topics[n % len(self.topics)]
            value = b"%s%d:%d" % (self.prefix.encode(), p, n)
            key = b"k%d" % (n % self.keys) if self.keys else None
            if self.delay_every and n % self.delay_every == 0:
                fut = client.publish_nowait(topic, value, key=key, deliver_after=self.delay_s)
            else:
                fut = client.publish_nowait(topic, value, key=key)
            pending.append(asyncio.create_task(self._record(topic, value, fut)))
            n += 1
            await asyncio.sleep(interval)
        await asyncio.gather(*pending)

    async def _send(self, p: int, client: HedwigClient, flush_every: int = 25) -> None:
        """Queue messages with ``send`` (no future) and flush every ``flush_every``: a flush
        that raises nothing acknowledges them all; one that raises leaves their outcome
        unknown (each may or may not be stored, but never twice, and in order)."""
        n = 0
        interval = 1.0 / self.rate
        sent: list[tuple[str, bytes]] = []
        while not self._stop.is_set():
            topic = self.topics[n % len(self.topics)]
            value = b"pub-s%d:%d" % (p, n)
            client.send(topic, value)
            sent.append((topic, value))
            n += 1
            if n % flush_every == 0 or self._stop.is_set():
                try:
                    await client.flush()
                except HedwigError as exc:
                    log.info("send%d: a flush failed: %r", p, exc)
                    self.history.failed += len(sent)
                else:
                    for t, v in sent:
                        self.history.flushed[t].append(v)
                    self.history.ack_times.append(time.monotonic())
                sent = []
            await asyncio.sleep(interval)

    async def _record(self, topic: str, value: bytes, fut: asyncio.Future[PublishResult]) -> None:
        try:
            result = await fut
        except HedwigError:
            self.history.failed += 1
            return
        seq = getattr(result, "seq", 0)
        self.history.acked[lane_name(topic, getattr(result, "lane", 0))].append((value, seq))
        now = time.monotonic()
        self.history.ack_times.append(now)
        self.history.topic_ack_times[topic].append(now)

    async def _drain(self, topic: str, name: str, sub: object) -> None:
        from hedwig.client import Subscriber

        assert isinstance(sub, Subscriber)
        with contextlib.suppress(asyncio.CancelledError):
            try:
                async for m in sub:
                    key = (lane_name(topic, m.lane) if m.lane else topic, name)
                    self.history.delivered[key].append((m.seq, m.value))
                    sub.consume(m.seq, m.lane)
            except HedwigError as exc:
                log.warning("%s/%s gave up: %r", topic, name, exc)
                self.history.subscriber_errors[(topic, name)] = repr(exc)

    async def stop_publishing(self) -> None:
        self._stop.set()
        publishers = self._tasks[-(self.publishers + self.senders) :]
        await asyncio.gather(*publishers)

    async def finish(self, timeout: float = 60.0) -> History:
        """Stop publishing, read every log back, let subscribers catch up, close."""
        await self.stop_publishing()
        log.info("publishing stopped: %d acknowledged", self.history.acked_count)
        reader = HedwigClient(
            self.hubs, retry=self.retry, security=self.security, network=self.network
        )
        logs: list[str] = []
        try:
            for topic in self.topics:
                lanes = (await reader.describe_lanes(topic)).lanes
                for name in (lane_name(topic, x.index) for x in lanes):
                    self.history.log[name] = await read_all(reader, name)
                    logs.append(name)
                    log.info("read %s back: %d messages", name, len(self.history.log[name]))
        finally:
            await reader.close()
        deadline = time.monotonic() + timeout
        for topic in logs:
            last = self.history.log[topic][-1][0] if self.history.log[topic] else 0
            for s in range(self.subscribers):
                key = (topic, f"checker-{s}")
                while time.monotonic() < deadline:
                    got = self.history.delivered[key]
                    if last == 0 or (got and max(seq for seq, _ in got) >= last):
                        break
                    await asyncio.sleep(0.1)
                high = max((q for q, _ in self.history.delivered[key]), default=0)
                log.info("%s/%s: delivered up to %d of %d", topic, key[1], high, last)
        for t in self._tasks:
            t.cancel()
        for c in self._clients:
            with contextlib.suppress(HedwigError):
                await asyncio.wait_for(c.close(), 10)
        return self.history


async def read_all(client: HedwigClient, topic: str) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    info = await client.topic_info(topic)
    seq = 0
    while True:
        msgs = await client.read(topic, seq, max_messages=5000)
        for batch in msgs.batches:
            for m in batch.delivered():
                if m.seq >= max(seq, 1) and (not out or m.seq > out[-1][0]):
                    out.append((m.seq, m.value))
        if not out or out[-1][0] >= max(msgs.last_seq, info.last_seq):
            return out
        seq = out[-1][0] + 1


def _out_of_publishing_order(topic: str, log: list[tuple[int, bytes]]) -> list[str]:
    """Each publisher's numbered messages (``<publisher>:<n>``) must be in the log in the order
    they were published, whatever was acknowledged: acknowledgements alone miss a log that
    holds two of them swapped if their answers came back in log order."""
    problems: list[str] = []
    last: dict[bytes, tuple[int, int]] = {}
    for seq, value in log:
        pub, _, n = value.partition(b":")
        if not n.isdigit():
            continue
        index = int(n)
        before = last.get(pub)
        if before is not None and before[0] > index:
            problems.append(
                f"{topic}: {value!r} (at {seq}) is in the log after a message its publisher "
                f"published later ({pub.decode()}:{before[0]} at {before[1]})"
            )
        else:
            last[pub] = (index, seq)
    return problems


def check(history: History) -> None:
    problems: list[str] = []
    for topic, acked in history.acked.items():
        if topic in history.log:
            continue
        # A sealed lane dropped before it could be read back (its hub drops it only once every
        # subscriber has consumed all of it): what was acknowledged there must have reached
        # every subscriber, at the sequence id its acknowledgement gave.
        base = lane_of(topic)[0]
        for name in history.subscribers.get(base, []):
            seen = set(history.delivered.get((topic, name), []))
            lost = [(v, q) for v, q in acked if q and (q, v) not in seen]
            if lost:
                problems.append(f"{topic}/{name}: dropped lane, {len(lost)} acknowledged missing")
    for topic, log in history.log.items():
        seqs = [s for s, _ in log]
        if seqs != list(range(1, len(seqs) + 1)):
            problems.append(f"{topic}: log sequence ids are not 1..{len(seqs)} without gaps")
        by_value: dict[bytes, list[int]] = defaultdict(list)
        for seq, value in log:
            by_value[value].append(seq)
        dups = {v: s for v, s in by_value.items() if len(s) > 1}
        if dups:
            problems.append(
                f"{topic}: {len(dups)} messages stored more than once, e.g. "
                f"{next(iter(dups.items()))}"
            )
        strangers = [v for v in by_value if not v.startswith(b"pub")]
        if strangers:
            problems.append(f"{topic}: unknown messages in the log: {strangers[:3]}")
        problems += _out_of_publishing_order(topic, log)
        at = dict(log)
        last_by_publisher: dict[bytes, tuple[int, bytes]] = {}
        for value, seq in history.acked.get(topic, []):
            if seq == 0 and len(by_value.get(value, [])) == 1:
                problems.append(
                    f"{topic}: {value!r} acked as a duplicate of unknown place "
                    f"(it is in the log once, at {by_value[value][0]})"
                )
                continue
            if at.get(seq) != value:
                problems.append(
                    f"{topic}: acknowledged {value!r} at seq {seq} but the log holds "
                    f"{at.get(seq)!r} there"
                )
                continue
            pub = value.split(b":")[0]
            latest, later = last_by_publisher.get(pub, (-1, b""))
            if latest > seq:
                problems.append(
                    f"{topic}: {value!r} (at {seq}) acknowledged after a later message "
                    f"({later!r} at {latest})"
                )
            else:
                last_by_publisher[pub] = (seq, value)
        last_sent: dict[bytes, tuple[int, bytes]] = {}
        for value in history.flushed.get(topic, []):
            places = by_value.get(value, [])
            if not places:
                problems.append(f"{topic}: {value!r} was sent and flushed but is not in the log")
                continue
            sender = value.split(b":")[0]
            before, earlier = last_sent.get(sender, (0, b""))
            if before > places[0]:
                # Where both are, for whoever reads the hubs' logs next.
                problems.append(
                    f"{topic}: {value!r} is in the log before a message sent earlier "
                    f"({value!r} at seq {places[0]}, {earlier!r} at seq {before})"
                )
            last_sent[sender] = (places[0], value)
        for name in history.subscribers.get(lane_of(topic)[0], []):
            if log and (topic, name) not in history.delivered:
                why = history.subscriber_errors.get((lane_of(topic)[0], name))
                problems.append(
                    f"{topic}/{name}: received nothing of it"
                    + (f" (the subscriber gave up: {why})" if why else "")
                )
        for (t, name), got in history.delivered.items():
            if t != topic:
                continue
            high = 0
            fresh: list[tuple[int, bytes]] = []
            for seq, value in got:
                if seq <= high:
                    continue  # a redelivery after reconnecting: allowed
                if seq != high + 1 and high != 0:
                    problems.append(f"{topic}/{name}: gap after {high}: next delivery was {seq}")
                    break
                fresh.append((seq, value))
                high = seq
            first = fresh[0][0] if fresh else 1
            expected = [(s, v) for s, v in log if s >= first]
            if fresh != expected[: len(fresh)]:
                problems.append(f"{topic}/{name}: deliveries differ from the log")
            if len(fresh) < len(expected):
                why = history.subscriber_errors.get((lane_of(t)[0], name))
                problems.append(
                    f"{topic}/{name}: received up to {high}, the log ends at {log[-1][0]}"
                    + (f" (the subscriber gave up: {why})" if why else "")
                )
    assert not problems, "\n".join(problems[:20])


async def under_load(
    work: Workload, fault: Callable[[], Awaitable[object]], *, before: float, after: float
) -> History:
    """The scenarios' run: ``work`` started and kept up for ``before`` seconds, ``fault``
    (its steps), ``after`` seconds more, then the history read back and checked. Publishing
    must have gone on after the fault. The two pauses are the load the scenario runs under,
    not waits for anything."""
    await work.start()
    await asyncio.sleep(before)  # load before the fault
    acked_before = work.history.acked_count
    assert acked_before > 0
    await fault()
    await asyncio.sleep(after)  # load during and after it
    history = await work.finish()
    assert history.acked_count > acked_before, "publishing did not resume after the fault"
    check(history)
    return history
