"""Malformed input closes its connection and leaves nothing behind.

A connection closed for malformed input kept the ``ProtocolError`` that broke it, whose
traceback held the frames that raised it, and so the connection and its buffers: a reference
cycle per connection, which only the hub's rarely run cycle collector freed (four minutes of
mutated frames took a hub from 77 to 427 MB). With the cycle collector off, such a connection
must be freed as soon as it is closed, by reference counting alone.
"""

from __future__ import annotations

import asyncio
import gc
import ssl
import weakref
from collections.abc import Awaitable, Callable
from typing import cast

import pytest

from hedwig.errors import MalformedBatchError, ProtocolError
from hedwig.hub.front.server import ClientConnection
from hedwig.protocol import (
    Connection,
    EncodedMessages,
    Publish,
    RefusedFrame,
    Role,
    encode_values,
)
from hedwig.protocol.codec import encode_frame
from hedwig.protocol.wire import HEADER, PROTOCOL_VERSION
from tests.security.conftest import SecureRegion

# A header of a protocol version nobody speaks, then more bytes: BROKEN at once.
MALFORMED = HEADER.pack(64, PROTOCOL_VERSION + 7, 0x01, 0, 1) + b"\x00" * 60


def lying_batch() -> bytes:
    """A PUBLISH whose batch says it holds two messages and holds one: refused, framing
    intact (``RefusedFrame``)."""
    payload = encode_values([b"only one"])
    frame = bytearray(
        encode_frame(
            Publish(
                request_id=1,
                topic="t",
                publisher_id="p",
                publisher_seq=1,
                messages=EncodedMessages(count=1, payload=payload),
            )
        )
    )
    at = frame.index(payload)
    frame[at - 4 : at] = (2).to_bytes(4, "big")  # the count, just before the messages
    return bytes(frame)


def test_a_broken_connection_keeps_no_exception_and_no_buffer() -> None:
    gc.disable()
    try:
        conn = Connection(Role.HUB)
        conn.receive_data(b"\x00" * 100_000)  # a frame begun: buffered
        conn.receive_data(MALFORMED)
        with pytest.raises(ProtocolError, match="version"):
            conn.next_frames()
        assert conn.broken and conn.pending_bytes == 0
        # Every later call says why, again.
        with pytest.raises(ProtocolError, match="version"):
            conn.receive_data(b"x")
        ref = weakref.ref(conn)
        del conn
        assert ref() is None, "the broken connection is in a reference cycle"
    finally:
        gc.enable()


def test_refused_frames_keep_no_traceback_and_so_not_their_connection() -> None:
    gc.disable()
    try:
        conn = Connection(Role.HUB)
        conn.receive_data(lying_batch() * 3)
        frames = conn.next_frames()
        assert [type(f) for f in frames] == [RefusedFrame] * 3
        error = cast(RefusedFrame, frames[0]).error
        assert isinstance(error, MalformedBatchError) and "batch" in str(error)
        assert error.__traceback__ is None and error.__cause__ is None
        del frames, error
        ref = weakref.ref(conn)
        del conn
        assert ref() is None, "a refused frame's exception holds its connection in a cycle"
    finally:
        gc.enable()


async def _hub_side(secure: SecureRegion, port: int) -> ClientConnection:
    hub = secure.hubs[0]
    async with asyncio.timeout(5):
        while True:
            for conn in hub.front.connections:
                if conn.name.endswith(f":{port}"):
                    return conn
            await asyncio.sleep(0.01)


async def _freed_without_the_collector(
    secure: SecureRegion,
    send: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> None:
    """Five connections, each given ``send`` (which ends when the hub has hung up), are freed
    by reference counting alone once the hub has let go of them, the cycle collector off."""
    host, port = secure.hubs[0].address.rsplit(":", 1)
    tls = ssl.create_default_context(cafile=secure.pki.path("hub-ca.crt"))
    refs: list[weakref.ref[ClientConnection]] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(5):
            reader, writer = await asyncio.open_connection(host, int(port), ssl=tls)
            local_port = writer.get_extra_info("sockname")[1]
            refs.append(weakref.ref(await _hub_side(secure, local_port)))
            await send(reader, writer)
            writer.close()
        # The hub's side is told its connection is lost on the next turns of the loop.
        async with asyncio.timeout(5):
            while any(r() is not None for r in refs):
                await asyncio.sleep(0.05)
                if all(r() not in secure.hubs[0].front.connections for r in refs):
                    await asyncio.sleep(0.2)
                    break
        assert [r() for r in refs] == [None] * len(refs), "kept in a reference cycle"
    finally:
        gc.enable()


async def test_a_connection_closed_for_malformed_input_is_freed_without_the_collector(
    secure: SecureRegion,
) -> None:
    async def malformed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"\x00" * 4096 + MALFORMED)  # a frame begun, then garbage
        assert await asyncio.wait_for(reader.read(), 5) == b""  # the hub hung up

    await _freed_without_the_collector(secure, malformed)


async def test_a_connection_closed_after_refused_batches_is_freed_without_the_collector(
    secure: SecureRegion,
) -> None:
    """Anonymous, so closed after three refusals: the refused frames after those are never
    answered (the exception of each answered one is let go of as it is answered)."""

    async def refused(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(lying_batch() * 8)
        async with asyncio.timeout(5):
            while await reader.read(1 << 16):
                pass  # its answers, then the hub hangs up

    await _freed_without_the_collector(secure, refused)
