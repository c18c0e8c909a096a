"""Frames written in one turn of the event loop go to the socket in one write
(``hedwig.net.coalescing``), on both ends of a real TCP connection to a hub."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from hedwig.hub import Hub, HubConfig
from hedwig.metadata.memory import MemoryBackend, MemoryMetadataStore
from hedwig.net.coalescing import FLUSH_BYTES, TurnWriter
from hedwig.net.connection import HubConnection
from hedwig.protocol import Ok, Ping
from hedwig.settings import ConnectionSettings, StorageSettings
from tests import scratch


class Recording:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closing = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closing


async def test_a_turns_frames_are_written_once_it_ends() -> None:
    transport = Recording()
    writer = TurnWriter(transport)  # type: ignore[arg-type]
    for frame in (b"one", b"two", b"three"):
        writer.write(frame)
    assert transport.writes == []  # not before the turn ends
    await asyncio.sleep(0)
    assert transport.writes == [b"onetwothree"]
    writer.write(b"four")
    await asyncio.sleep(0)
    assert transport.writes == [b"onetwothree", b"four"]  # a turn with one frame: as it is


async def test_what_is_gathered_is_bounded_and_flushed_before_a_close() -> None:
    transport = Recording()
    writer = TurnWriter(transport)  # type: ignore[arg-type]
    big = b"x" * (FLUSH_BYTES // 2)
    writer.write(big)
    writer.write(big)  # reaches the bound: written now, so flow control sees it at once
    assert transport.writes == [big + big]
    writer.write(b"last")
    writer.flush()  # as a connection does before it closes its transport
    assert transport.writes == [big + big, b"last"]
    await asyncio.sleep(0)
    assert len(transport.writes) == 2  # the end of the turn finds nothing more
    writer.write(b"too late")
    transport.closing = True
    await asyncio.sleep(0)
    assert len(transport.writes) == 2  # a closing transport is written no more


@pytest.fixture
async def hub() -> AsyncIterator[Hub]:
    config = HubConfig(
        connection=ConnectionSettings(listen="127.0.0.1:0"),
        storage=StorageSettings(data_dir=scratch.mkdtemp("hub-"), replication="1/1/1"),
    )
    hub = Hub(config, store=MemoryMetadataStore(MemoryBackend(), "mem"))
    await hub.start()
    yield hub
    await hub.stop()


async def test_requests_made_in_one_turn_go_in_one_write_and_each_is_answered(
    hub: Hub, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fifty pings sent at once over TCP: one write from the client, few from the hub (its
    answers are written in the turns its handlers finish in), fifty answers."""
    writes: list[int] = []
    real = TurnWriter.flush

    def counted(self: TurnWriter) -> None:
        if self._chunks:
            writes.append(len(self._chunks))
        real(self)

    monkeypatch.setattr(TurnWriter, "flush", counted)
    conn = await HubConnection.open(hub.address)
    try:
        writes.clear()
        ids = [conn.next_id() for _ in range(50)]
        sent = [conn.send_nowait(Ping(request_id=i)) for i in ids]
        answers = await asyncio.wait_for(asyncio.gather(*sent), 10)
    finally:
        conn.close()
    assert all(isinstance(a, Ok) for a in answers)
    assert [a.request_id for a in answers] == ids
    assert writes[0] == 50  # the client's: every ping in one write
    assert sum(writes) == 100 and len(writes) <= 10, writes  # and the hub's fifty answers
