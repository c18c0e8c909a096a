"""Consumers of a shared subscription as processes, and the checker of what they saw.

Each consumer (``queue_consumer``), on a secured cluster with the certificate of a user granted
``subscribe`` on the topic and nothing else, prints every delivery with its delivery count and every
acknowledgement it sent. After the faults the topic's log is read back, the subscription's
mark is awaited at the log's end (the owner's own word that everything is acknowledged), and
the history is checked (``check_queue``):

1. nothing is lost: the subscription's mark reaches the end of the log, and every message of
   the log was acknowledged by some consumer or is in the subscription's dead-letter topic
   (``dead_letter``: read back by its origin headers, each letter the log's message at its
   origin sequence id); every message the consumers always nack is dead-lettered, and a
   letter stored twice (an owner killed between publishing and writing its acknowledgement,
   whose duplicate the dead-letter topic no longer remembered) is counted and reported;
2. every delivery is a message of the log, at its sequence id;
3. a message is given out again only as a redelivery: per message, no two deliveries carry
   the same count, except after an owner's crash, which may forget the last attempt (then
   the repeats are counted and reported, not refused);
4. the redeliveries are counted: a consumer killed mid-message, a hub killed, a nack or a
   timeout each explain some, and the report says how many;
5. for key-shared (``per_key``): in the order of the machine's clock, each key's messages
   were handed out in log order, but for messages handed out again (a delivery of a message
   below one already handed out for its key is a redelivery, allowed only when that message
   was delivered before);
6. delayed messages (``deliver_after``) are delivered no earlier than their delivery time, by
   the wall clock every process on the machine shares (``W`` lines).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from hedwig.client import HedwigClient, RetryPolicy
from hedwig.hub.serving.dead_letters import HEADER_SEQ, HEADER_TOPIC
from hedwig.protocol import SubscriptionType
from hedwig.security import ClientSecurity
from tests.failure.queue_consumer import poison

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class QueueHistory:
    # (consumer, seq, count, value) in the order each consumer printed them.
    delivered: list[tuple[int, int, int, str]] = field(default_factory=list)
    # (time, consumer, seq, key) of each delivery of a keyed message.
    keyed: list[tuple[float, int, int, str]] = field(default_factory=list)
    acked: Counter[int] = field(default_factory=Counter)
    nacked: Counter[int] = field(default_factory=Counter)
    # Letters in the dead-letter topic, by origin sequence id (None: the subscription has
    # no dead-letter topic), and their values.
    dead_letters: dict[int, list[bytes]] | None = None
    log: list[tuple[int, bytes]] = field(default_factory=list)
    mark: int = 0
    killed: int = 0
    # (seq, wall ms when it arrived, its delivery time) of each delivery of a delayed message.
    delayed: list[tuple[int, int, int]] = field(default_factory=list)

    @property
    def redeliveries(self) -> int:
        return sum(1 for _, _, count, _ in self.delivered if count > 1)


class Consumer:
    """A consumer process and what it printed; ``env``: the client security variables it
    connects with (``DevSecurity.client_env``), none on a plain cluster."""

    def __init__(
        self,
        index: int,
        hubs: list[str],
        topic: str,
        name: str,
        kind: SubscriptionType,
        work_s: float = 0.002,
        env: Mapping[str, str] | None = None,
        *,
        nack_poison: bool = False,
    ) -> None:
        self.index = index
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.failure.queue_consumer",
                ",".join(hubs),
                topic,
                name,
                kind.label,
                str(work_s),
                "1" if nack_poison else "0",
            ],
            cwd=ROOT,
            # Its security is ``env``'s alone, never the caller's shell's.
            env={k: v for k, v in os.environ.items() if not k.startswith("HEDWIG_")}
            | dict(env or {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = asyncio.get_running_loop().run_in_executor(None, self._read)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    async def ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "READY" not in self.lines:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise AssertionError(f"consumer {self.index} did not start")
            await asyncio.sleep(0.05)

    def kill(self) -> None:
        self.proc.kill()

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(10)
        await self._reader

    def record(self, history: QueueHistory) -> None:
        for line in self.lines:
            kind, _, rest = line.partition(" ")
            if kind == "D":
                seq, count, at, key, value = rest.split(" ", 4)
                history.delivered.append((self.index, int(seq), int(count), value))
                if key != "-":
                    history.keyed.append((float(at), self.index, int(seq), key))
            elif kind == "A":
                history.acked[int(rest)] += 1
            elif kind == "N":
                history.nacked[int(rest)] += 1
            elif kind == "W":
                seq, arrived, due = rest.split(" ")
                history.delayed.append((int(seq), int(arrived), int(due)))


async def read_dead_letters(
    hubs: list[str], topic: str, dead_letter: str, *, security: ClientSecurity | None = None
) -> dict[int, list[bytes]]:
    """The letters ``dead_letter`` holds from ``topic``, by origin sequence id."""
    out: dict[int, list[bytes]] = defaultdict(list)
    async with HedwigClient(hubs, retry=RetryPolicy(deadline_s=60), security=security) as c:
        last = (await c.topic_info(dead_letter)).last_seq
        seq = 1
        while seq <= last:
            msgs = await c.read(dead_letter, seq, max_messages=5000)
            for batch in msgs.batches:
                for m in batch.delivered():
                    seq = max(seq, m.seq + 1)
                    headers = dict(m.headers)
                    if headers.get(HEADER_TOPIC) == topic.encode():
                        out[int(headers[HEADER_SEQ])].append(m.value)
    return dict(out)


async def settle(
    hubs: list[str],
    topic: str,
    name: str,
    timeout: float = 60.0,
    *,
    security: ClientSecurity | None = None,
) -> tuple[list[tuple[int, bytes]], int]:
    """The topic's log, and the subscription's mark once it reaches the log's end (or where it
    stood at ``timeout``), read as ``security``'s principal."""
    retry = RetryPolicy(deadline_s=60)
    async with HedwigClient(hubs, retry=retry, security=security) as c:
        info = await c.topic_info(topic)
        out: list[tuple[int, bytes]] = []
        seq = 0
        while not out or out[-1][0] < info.last_seq:
            msgs = await c.read(topic, seq, max_messages=5000)
            for batch in msgs.batches:
                for m in batch.delivered():
                    if not out or m.seq > out[-1][0]:
                        out.append((m.seq, m.value))
            seq = out[-1][0] + 1 if out else 1
        deadline = time.monotonic() + timeout
        mark = 0
        while time.monotonic() < deadline:
            desc = await c.describe_topic(topic)
            mark = next((s.consumed_seq for s in desc.subscriptions if s.name == name), 0)
            if mark >= info.last_seq:
                break
            await asyncio.sleep(0.2)
        return out, mark


def check_queue(history: QueueHistory, *, owner_crashed: bool, per_key: bool = False) -> list[str]:
    """The problems found (empty: the history holds); raises on any of them but repeated
    counts after an owner's crash, which it returns for the report."""
    problems: list[str] = []
    last = history.log[-1][0] if history.log else 0
    if history.mark < last:
        problems.append(
            f"lost: the subscription's mark stopped at {history.mark}, the log ends at {last}"
        )
    at = {seq: value.decode() for seq, value in history.log}
    strangers = [(s, v) for _, s, _, v in history.delivered if at.get(s) != v]
    if strangers:
        problems.append(
            f"{len(strangers)} deliveries are not the log's message there, e.g. {strangers[0]}"
        )
    counts: dict[int, list[int]] = defaultdict(list)
    for _, seq, count, _ in history.delivered:
        counts[seq].append(count)
    repeated = {s: c for s, c in counts.items() if len(c) != len(set(c))}
    notes: list[str] = []
    if repeated:
        example = next(iter(repeated.items()))
        line = f"{len(repeated)} messages delivered twice with one count, e.g. {example}"
        (notes if owner_crashed else problems).append(line)
    notes += _dead_letters(history, problems)
    never = [s for s, _ in history.log if s not in counts]
    if never and history.mark < last:
        problems.append(f"{len(never)} messages never delivered, e.g. {never[:5]}")
    if per_key:
        problems += _key_order(history)
    early = [(s, due - arrived) for s, arrived, due in history.delayed if arrived < due]
    if early:
        problems.append(
            f"{len(early)} delayed messages delivered early, e.g. {early[:5]} (seq, ms early)"
        )
    if history.delayed:
        notes.append(f"{len({s for s, _, _ in history.delayed})} delayed messages, none early")
    assert not problems, "\n".join(problems)
    return notes


def _dead_letters(history: QueueHistory, problems: list[str]) -> list[str]:
    """Acknowledged by a consumer or dead-lettered, never neither (appended to ``problems``);
    the notes for the report."""
    letters = history.dead_letters
    if letters is None:
        return []
    at = dict(history.log)
    strangers = [s for s, vs in letters.items() if any(v != at.get(s) for v in vs)]
    if strangers:
        problems.append(f"{len(strangers)} dead letters are not their origin, e.g. {strangers[:5]}")
    neither = [s for s, _ in history.log if s not in history.acked and s not in letters]
    if neither:
        problems.append(
            f"{len(neither)} messages neither acknowledged nor dead-lettered, e.g. {neither[:5]}"
        )
    kept = [s for s, v in history.log if poison(v) and s not in letters]
    if kept:
        problems.append(f"{len(kept)} always-nacked messages not dead-lettered, e.g. {kept[:5]}")
    notes = [f"{len(letters)} messages dead-lettered"]
    twice = sum(1 for vs in letters.values() if len(vs) > 1)
    if twice:
        notes.append(f"{twice} dead letters stored twice")
    return notes


def _key_order(history: QueueHistory) -> list[str]:
    problems: list[str] = []
    seen: dict[str, int] = {}
    delivered_before: set[int] = set()
    for _, consumer, seq, key in sorted(history.keyed):
        high = seen.get(key, 0)
        if seq < high and seq not in delivered_before:
            problems.append(f"key {key}: {seq} handed out after {high}, to consumer {consumer}")
        seen[key] = max(high, seq)
        delivered_before.add(seq)
    return problems[:10]
