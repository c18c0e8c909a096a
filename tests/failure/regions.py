"""The history check across linked regions (``history.check`` holds within each region).

Each region's log of a topic is read back with each message's stored publisher id: a local
message under its publisher's own id, a replicated one under ``@<origin region>/<publisher>``
(``hedwig.hub.replicating.applying``). Across the regions:

1. nothing loops: no region's log holds a message replicated from itself, and a replicated
   message names an origin region that is linked (one of the others);
2. every message of a region's log that originated there (its local part) is in every other
   region's log exactly once, as replicated from it, and nothing replicated from a region is
   missing from that region's local part or was never published there;
3. each publisher's messages are in every region's log in the order of its origin region's
   log (and so in the order it published them, which ``history.check`` holds there);
4. every message acknowledged in a region is in every region's log.
"""

from __future__ import annotations

from collections import defaultdict

from hedwig.client import HedwigClient
from hedwig.hub.replicating.applying import origin_of
from tests.failure.history import History

# (sequence id, stored publisher id, value)
Stored = tuple[int, str, bytes]


async def read_with_origins(client: HedwigClient, topic: str) -> list[Stored]:
    """Every message of ``topic`` from its first, with the publisher id it is stored under."""
    out: list[Stored] = []
    seq = 1
    while True:
        msgs = await client.read(topic, seq, max_messages=5000)
        for batch in msgs.batches:
            for m in batch.delivered():
                if m.seq >= seq and (not out or m.seq > out[-1][0]):
                    out.append((m.seq, m.publisher_id, m.value))
        if not out or out[-1][0] >= msgs.last_seq:
            return out
        seq = out[-1][0] + 1


def origins(log: list[Stored], region: str) -> dict[str, list[bytes]]:
    """A region's log split by origin region (``region`` for its local part), in log order."""
    out: dict[str, list[bytes]] = defaultdict(list)
    for _, pid, value in log:
        origin = origin_of(pid)
        out[region if origin is None else origin[0]].append(value)
    return out


def problems_across(
    logs: dict[str, dict[str, list[Stored]]], acked: dict[str, History]
) -> list[str]:
    """What breaks the rules above; ``logs[region][topic]`` is a region's log of a topic,
    ``acked[region]`` the history of the workload run there."""
    problems: list[str] = []
    regions = sorted(logs)
    topics = sorted({t for by_topic in logs.values() for t in by_topic})
    for topic in topics:
        split = {r: origins(logs[r].get(topic, []), r) for r in regions}
        for r in regions:
            unknown = set(split[r]) - set(regions)
            if unknown:
                problems.append(f"{topic}@{r}: messages from unknown regions {sorted(unknown)}")
            for _, pid, value in logs[r].get(topic, []):
                origin = origin_of(pid)
                if origin is not None and origin[0] == r:
                    problems.append(f"{topic}@{r}: {value!r} came back to its own region")
                    break
            for other in regions:
                if other == r:
                    continue
                here, there = split[r].get(other, []), split[other].get(other, [])
                counts: dict[bytes, int] = defaultdict(int)
                for v in here:
                    counts[v] += 1
                twice = [v for v, n in counts.items() if n > 1]
                if twice:
                    problems.append(
                        f"{topic}@{r}: {len(twice)} messages of {other} stored more than once,"
                        f" e.g. {twice[0]!r}"
                    )
                missing = set(there) - set(here)
                if missing:
                    problems.append(
                        f"{topic}@{r}: {len(missing)} messages of {other} missing, e.g. "
                        f"{sorted(missing)[0]!r}"
                    )
                strangers = set(here) - set(there)
                if strangers:
                    problems.append(
                        f"{topic}@{r}: {len(strangers)} messages replicated from {other} that "
                        f"{other} does not hold, e.g. {sorted(strangers)[0]!r}"
                    )
                by_pub_here, by_pub_there = _by_publisher(here), _by_publisher(there)
                for pub, values in by_pub_there.items():
                    got = [v for v in by_pub_here.get(pub, []) if v in set(values)]
                    if got != [v for v in values if v in set(got)]:
                        problems.append(
                            f"{topic}@{r}: {pub.decode()}'s messages from {other} are not in "
                            f"{other}'s order"
                        )
    for home, history in acked.items():
        for topic, pairs in history.acked.items():
            for r in regions:
                present = {v for _, _, v in logs[r].get(topic, [])}
                lost = [v for v, _ in pairs if v not in present]
                if lost:
                    problems.append(
                        f"{topic}@{r}: {len(lost)} messages acknowledged in {home} missing, "
                        f"e.g. {lost[0]!r}"
                    )
    return problems


def _by_publisher(values: list[bytes]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for v in values:
        out[v.partition(b":")[0]].append(v)
    return out
