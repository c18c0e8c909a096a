"""Reading one partition's range on an executor.

A task reads ``[start, end)`` of one topic with READ requests (no subscription: readers never
change what subscribers see), keeping the next request in flight while it decodes the
previous answer. The hub answers whole batches, so the first batch of an answer may begin
before the position and the last may run past ``end``: both are sliced.

What can go wrong, and what we do:

- The topic moves to another hub, or its hub restarts, mid-range: the client follows the
  redirect or retries with backoff until ``retry_deadline_s``; the task only fails after that.
- The range begins before the first retained message (retention collected it):
  ``failOnDataLoss=true`` (the default) fails the task with ``DataLossError``; otherwise the
  missing messages are skipped with a warning and reading goes on from the first kept one.
- The hub has fewer messages than the range promised (the topic was deleted and created
  again): the same choice, fail or warn and stop.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Iterator

import pyarrow as pa

from hedwig.client import HedwigClient, SyncClient
from hedwig.errors import MessagesUnavailableError
from hedwig.protocol import Messages
from hedwig_spark.connection import HubSession
from hedwig_spark.partitions import TopicRange
from hedwig_spark.schema import to_record_batch

log = logging.getLogger(__name__)

# One READ answer is at most this big; whole batches, so it may be exceeded by one batch.
MAX_READ_BYTES = 16 << 20


class DataLossError(RuntimeError):
    """Messages a query should have read are gone (retention, or a recreated topic)."""


def read_range(part: TopicRange) -> Iterator[pa.RecordBatch]:
    if part.rows == 0:
        return
    with HubSession(
        part.hubs, retry_deadline_s=part.retry_deadline_s, security=part.security
    ) as session:
        yield from _read(session, part)


def _read(session: SyncClient, part: TopicRange) -> Iterator[pa.RecordBatch]:
    topic, end = part.topic, part.end

    def request(seq: int) -> concurrent.futures.Future[Messages]:
        count = min(part.fetch_messages, end - seq)

        async def go(client: HedwigClient) -> Messages:
            return await client.read(topic, seq, max_messages=count, max_bytes=MAX_READ_BYTES)

        return session.submit(go)

    seq = part.start
    pending = request(seq)
    while seq < end:
        try:
            answer = pending.result()
        except MessagesUnavailableError as exc:
            first = exc.first_available or end
            _lost(part, seq, min(first, end), "collected by retention")
            seq = max(seq + 1, min(first, end))
            if seq < end:
                pending = request(seq)
            continue
        batches = [b for b in answer.batches if b.last_seq >= seq and b.first_seq < end]
        if not batches:
            _lost(part, seq, end, f"not in the topic, whose last seq is {answer.last_seq}")
            return
        if batches[0].first_seq > seq:
            _lost(part, seq, batches[0].first_seq, "missing from the hub's answer")
        next_seq = min(batches[-1].last_seq + 1, end)
        if next_seq < end:
            pending = request(next_seq)  # in flight while we decode this answer
        sliced = [b.slice(max(seq, b.first_seq), min(end - 1, b.last_seq)) for b in batches]
        yield to_record_batch(topic, sliced)
        seq = next_seq


def _lost(part: TopicRange, lo: int, hi: int, why: str) -> None:
    what = f"topic {part.topic!r}: messages {lo}..{hi - 1} are {why}"
    if part.fail_on_data_loss:
        raise DataLossError(
            f"{what}. Some data may have been lost; if that is expected, set the option "
            "failOnDataLoss to false."
        )
    log.warning("%s; skipping them (failOnDataLoss=false)", what)
