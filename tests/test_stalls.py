"""The stall watch: a loop that stands still is reported with where it stood, and for how long."""

from __future__ import annotations

import asyncio
import gc
import logging
import time

import pytest

from hedwig.client import HedwigClient
from hedwig.devcluster.etcd import EtcdServer
from hedwig.hub.process import stalls
from hedwig.hub.process.loops import WALK_SLICE, in_turns
from hedwig.hub.process.stalls import StallWatch
from tests.cluster_helpers import lone_hub
from tests.waiting import until


def _stuck_in_a_long_computation(seconds: float) -> None:
    time.sleep(seconds)  # stands for any long synchronous stretch on the loop


async def test_a_stalled_loop_is_reported_with_its_stack_and_length(
    caplog: pytest.LogCaptureFixture,
) -> None:
    ended: list[float] = []
    watch = StallWatch(threshold_s=0.4, on_stall=ended.append)
    watch.start()
    try:
        await asyncio.sleep(0.5)  # the test: a loop that runs this long is not stalled
        assert not ended, "a loop that runs is not stalled"
        with caplog.at_level(logging.WARNING, logger=stalls.__name__):
            _stuck_in_a_long_computation(1.2)
            await until(lambda: ended, what="the stall's end")  # the loop runs again
    finally:
        watch.stop()
    assert len(ended) == 1 and 1.0 <= ended[0] < 3.0, ended
    text = caplog.text
    # Where it stood, seen from the watching thread while the loop was stuck.
    assert "has stood still" in text and "_stuck_in_a_long_computation" in text
    assert "stood still for 1." in text or "stood still for 2." in text
    assert watch.stalls == 1


async def test_a_long_collection_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    pauses: list[float] = []
    watch = StallWatch(threshold_s=0.0, on_gc_pause=pauses.append)  # every pause is long
    watch.start()
    try:
        with caplog.at_level(logging.WARNING, logger=stalls.__name__):
            gc.collect()
    finally:
        watch.stop()
    assert pauses and "cycle collector (generation 2)" in caplog.text
    assert watch._gc not in gc.callbacks, "stop takes its collector hook away"


async def test_every_collection_is_counted_with_its_generation() -> None:
    seen: list[tuple[int, float]] = []
    watch = StallWatch(on_collection=lambda generation, took: seen.append((generation, took)))
    watch.start()
    try:
        gc.collect(0)
        gc.collect(1)
    finally:
        watch.stop()
    assert [g for g, _ in seen][-2:] == [0, 1], seen
    assert all(0.0 <= took < 5.0 for _, took in seen)


@pytest.mark.integration
async def test_a_stall_that_costs_the_session_is_logged_first_with_its_stack(
    etcd_server: EtcdServer, region: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A real hub on etcd whose event loop stands still past its 2 s lease: the watch logs
    where it stood while it stood there, before the hub loses its topic and finds its lease
    gone; then it registers again with a new lease. A million-topic hub lost its session this
    way with nothing in its log."""
    hub = lone_hub(etcd_server.url, region, session_timeout_s=2.0)
    await hub.start()
    try:
        async with HedwigClient(hub.address) as client:
            await client.publish("stalled", b"before")
        with caplog.at_level(logging.INFO):
            _stuck_in_a_long_computation(5.0)  # past the lease: etcd expires it meanwhile
            await until(
                lambda: "re-registered after session loss" in caplog.text,
                what="re-registered",
                interval=0.1,
            )
        text = caplog.text
        assert "connected -> lost" in text, "the hub did not notice its lease was gone"
        assert "re-registered after session loss" in text, "nor come back with a new one"
        assert "has stood still" in text and "_stuck_in_a_long_computation" in text
        # The topic goes by whichever comes first: its owner record's watch, or the session.
        lost = [text.find(m) for m in ("lost topic 'stalled'", "dropping all 1 topics")]
        assert max(lost) >= 0, "the hub did not drop its topic"
        stall = text.index("has stood still")
        assert stall < min(i for i in lost if i >= 0)
        assert stall < text.index("connected -> lost")
    finally:
        await hub.stop()


async def test_a_walk_over_every_owned_topic_lets_the_loop_run_between_slices() -> None:
    """A hub owning half a million topics stood still for 2 s in one walk over them (idle
    expiry): the walks give the loop a turn every ``WALK_SLICE`` topics."""
    seen_at: list[int] = []
    walked = 0

    def note() -> None:
        seen_at.append(walked)

    asyncio.get_running_loop().call_soon(note)
    async for _ in in_turns(list(range(3 * WALK_SLICE))):
        walked += 1
    assert seen_at == [WALK_SLICE]  # ran at the first turn, not after the walk
