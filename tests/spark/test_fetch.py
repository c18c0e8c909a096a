"""The partition reader against an in-memory topic: slicing, prefetch, retention, data loss."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from hedwig.errors import MessagesUnavailableError
from hedwig.protocol import Batch, EncodedMessages, Messages
from hedwig_spark.fetch import DataLossError, _read
from hedwig_spark.partitions import TopicRange


class FakeTopic:
    """A topic of batches of ``size`` messages, seqs ``first .. last``, as a hub answers READ."""

    def __init__(self, first: int, last: int, size: int = 7) -> None:
        self.first, self.last = first, last
        self.batches = []
        # Batches are aligned on seq 1, as if earlier ones had been collected.
        start = 1
        while start <= last:
            n = min(size, last - start + 1)
            if start + n - 1 >= first:
                values = [f"v{s}".encode() for s in range(start, start + n)]
                self.batches.append(
                    Batch(
                        first_seq=start,
                        publish_time_ms=1000,
                        publisher_id="p",
                        publisher_seq=start,
                        messages=EncodedMessages.of_values(values),
                    )
                )
            start += n
        self.requests: list[tuple[int, int]] = []

    async def read(self, topic: str, start: int, *, max_messages: int, max_bytes: int) -> Messages:
        self.requests.append((start, max_messages))
        if start < self.first:
            raise MessagesUnavailableError("collected", first_available=self.first)
        out, n = [], 0
        for b in self.batches:
            if b.last_seq >= start and n < max_messages:
                out.append(b)
                n += b.count
        return Messages(
            request_id=1, first_available=self.first, last_seq=self.last, batches=tuple(out)
        )


class FakeSession:
    def __init__(self, client: FakeTopic) -> None:
        self.client = client

    def submit(self, fn: Callable[[Any], Awaitable[Any]]) -> concurrent.futures.Future[Any]:
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()
        try:
            fut.set_result(asyncio.run(_await(fn(self.client))))
        except Exception as exc:
            fut.set_exception(exc)
        return fut


async def _await(aw: Awaitable[Any]) -> Any:
    return await aw


def part(start: int, end: int, *, fail: bool = True, fetch: int = 10) -> TopicRange:
    return TopicRange("t", start, end, ("h:1",), 5.0, fail, fetch)


def seqs(topic: FakeTopic, p: TopicRange) -> list[int]:
    out: list[int] = []
    for rb in _read(FakeSession(topic), p):  # type: ignore[arg-type]
        out.extend(rb.column("seq").to_pylist())
        assert rb.column("value").to_pylist() == [f"v{s}".encode() for s in out[-rb.num_rows :]]
    return out


def test_reads_exactly_the_range_slicing_whole_batches() -> None:
    topic = FakeTopic(1, 100)
    assert seqs(topic, part(10, 53)) == list(range(10, 53))
    # every request after the first starts where the previous answer ended
    starts = [s for s, _ in topic.requests]
    assert starts[0] == 10 and starts == sorted(set(starts))


def test_retention_fails_by_default() -> None:
    with pytest.raises(DataLossError, match=r"messages 5\.\.39 are collected"):
        seqs(FakeTopic(40, 100), part(5, 60))


def test_retention_skips_with_a_warning_when_allowed(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        got = seqs(FakeTopic(40, 100), part(5, 60, fail=False))
    assert got == list(range(40, 60))
    assert "failOnDataLoss=false" in caplog.text


def test_range_wholly_collected_reads_nothing_when_allowed() -> None:
    assert seqs(FakeTopic(80, 100), part(5, 60, fail=False)) == []


def test_topic_shorter_than_planned_is_data_loss() -> None:
    with pytest.raises(DataLossError, match="not in the topic"):
        seqs(FakeTopic(1, 20), part(1, 40))
    assert seqs(FakeTopic(1, 20), part(1, 40, fail=False)) == list(range(1, 21))
