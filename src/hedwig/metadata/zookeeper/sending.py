"""kazoo's sending of requests, many to a wake-up of its connection thread and one write.

kazoo (2.11, pinned in ``pyproject.toml``) hands each request to its connection thread by
queueing it and writing a byte to a socket pair, one byte per request; the thread wakes once
per byte, reads it, waits for the server's socket to be writable and sends that request
alone. A hub taking topics over makes thousands of ZooKeeper requests a second, and each
cost the event loop a system call (then a wait for the GIL the connection thread held) and
the connection thread four: profiled, kazoo's two threads and the crossings were half of a
hub's time in a failover.

Here the event loop's thread writes a byte only while the connection thread waits for one
(``armed``), and only once the turn of the loop that queued the request ends (``_wake``); the
connection thread, once woken, sends every request queued by then in one write, looking at
the queue again after it re-arms so that no request waits for another to wake it. A request
taken from the queue is pending (its answer awaited) before the write, so if the write
fails, each fails with the connection (ConnectionLoss: its outcome unknown), as one whose
answer was lost does; none is ever sent twice. (kazoo fails the requests still queued then
too, as it always has when a connection is lost.)

Answers are read the same way: kazoo read each with two ``recv`` calls (its length, then
its body), each after a ``poll``, and went back to waiting on the socket between answers.
Here one ``recv`` takes whatever has arrived (up to ``READ_CHUNK`` bytes: answers to a batch
arrive together), answers are cut from it, and every whole answer already read is handled
before the thread waits again (the socket has nothing more to say about those).

The methods replace kazoo's ``KazooClient._call`` and ``ConnectionHandler._send_request``,
``_read`` and ``_read_socket`` (``LeanKazooClient`` installs them) and keep everything else
they did.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from typing import Any

from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    ConnectionDropped,
    SessionExpiredError,
)
from kazoo.protocol.connection import (
    _CONNECTION_DROP,
    _SESSION_EXPIRED,
    AUTH_XID,
    CLOSE_RESPONSE,
    ConnectionHandler,
)
from kazoo.protocol.serialization import Auth, int_struct
from kazoo.protocol.states import KeeperState

# Wake-up bytes read at once (each ``call`` while the thread waits wrote one).
WAKE_BYTES = 4096
# Bytes of answers asked of the socket at once.
READ_CHUNK = 65536


class BatchingConnection(ConnectionHandler):  # type: ignore[misc]
    """kazoo's connection handler, sending all queued requests per wake-up."""

    # The connection thread is waiting for a wake-up byte (or about to): the next request
    # queued writes one. A class default: kazoo's own handler becomes one of these after
    # its ``__init__`` (``LeanKazooClient``).
    armed = True
    _xid: int  # kazoo's, counting the requests of the connection
    _socket: Any  # kazoo's, the connection's socket (a new one each connection)
    # Bytes read and not yet handled (from ``_inbox_pos`` on), and the socket they came from.
    _inbox = b""
    _inbox_pos = 0
    _inbox_of: Any = None

    def _read(self, length: int, timeout: float) -> bytes:
        """kazoo's ``_read``: ``length`` bytes of the connection, from what was read before
        if it holds them."""
        sock = self._socket
        if self._inbox_of is not sock:  # a new connection: nothing of the old one is left
            self._inbox_of, self._inbox, self._inbox_pos = sock, b"", 0
        inbox, pos = self._inbox, self._inbox_pos
        while len(inbox) - pos < length:
            inbox, pos = inbox[pos:] + self._receive(sock, timeout), 0
        self._inbox, self._inbox_pos = inbox, pos + length
        return inbox[pos : pos + length]

    def _receive(self, sock: Any, timeout: float) -> bytes:
        """What has arrived (at least a byte), as kazoo's ``_read`` waits for it."""
        with self._socket_error_handling():
            while True:
                # TLS: the wrapped socket may hold decrypted bytes the descriptor does not
                # show (kazoo's own test).
                buffered = hasattr(sock, "pending") and sock.pending() > 0
                if not buffered and not self.handler.select([sock], [], [], timeout)[0]:
                    raise self.handler.timeout_exception("socket time-out during read")
                try:
                    chunk: bytes = sock.recv(READ_CHUNK)
                except ssl.SSLError as exc:
                    if exc.errno in (ssl.SSL_ERROR_WANT_READ, ssl.SSL_ERROR_WANT_WRITE):
                        continue
                    raise
                if not chunk:
                    raise ConnectionDropped("socket connection broken")
                return chunk

    def _read_socket(self, read_timeout: float) -> Any:
        """kazoo's, once, then for each whole answer already read."""
        response = super()._read_socket(read_timeout)
        while response != CLOSE_RESPONSE and self._whole_answer_read():
            response = super()._read_socket(read_timeout)
        return response

    def _whole_answer_read(self) -> bool:
        if self._inbox_of is not self._socket:
            return False
        inbox, pos = self._inbox, self._inbox_pos
        held = len(inbox) - pos
        return held >= 4 and held >= 4 + int_struct.unpack_from(inbox, pos)[0]

    def _send_request(self, read_timeout: float, connect_timeout: float) -> None:
        queue = self.client._queue
        with contextlib.suppress(OSError):
            self._read_sock.recv(WAKE_BYTES)
        try:
            while True:
                self.armed = False
                self._send_queued(queue, connect_timeout)
                self.armed = True
                if not queue:
                    return
        except BaseException:
            # The connection failed. Armed again, or no request made from now on would wake
            # the thread. kazoo fails what is queued as it reconnects (ConnectionLoss, as it
            # does what is pending); a byte for anything still queued costs at most one
            # spurious wake-up.
            self.armed = True
            if queue:
                with contextlib.suppress(Exception):
                    self._write_sock.send(b"\0")
            raise

    def _send_queued(self, queue: Any, timeout: float) -> None:
        """Every request queued now, in one write; each pending from before it."""
        pending = self.client._pending
        out = bytearray()
        while queue:
            request, async_object = queue[0]
            if request is _SESSION_EXPIRED or request is _CONNECTION_DROP:
                if out:
                    break  # sent first; the next round comes back to it
                # kazoo's testing hooks, raised as kazoo raises them.
                if request is _SESSION_EXPIRED:
                    raise SessionExpiredError("Session expired: Testing")
                raise ConnectionDropped("Connection dropped: Testing")
            if request.type == Auth.type:
                xid = AUTH_XID
            else:
                self._xid = (self._xid % 2147483647) + 1
                xid = self._xid
            body = int_struct.pack(xid)
            if request.type:
                body += int_struct.pack(request.type)
            body += request.serialize()
            out += int_struct.pack(len(body))
            out += body
            queue.popleft()
            pending.append((request, async_object, xid))
        if out:
            self._write(bytes(out), timeout)


def call(client: Any, request: Any, async_object: Any) -> bool | None:
    """kazoo's ``KazooClient._call``, writing the wake-up byte only to a waiting thread,
    and on an event loop's thread only once its turn ends (``_wake``)."""
    state = client._state
    if state == KeeperState.AUTH_FAILED:
        async_object.set_exception(AuthFailedError())
        return False
    if state == KeeperState.CLOSED:
        async_object.set_exception(ConnectionClosedError("Connection has been closed"))
        return False
    if state == KeeperState.EXPIRED_SESSION:
        async_object.set_exception(SessionExpiredError())
        return False
    client._queue.append((request, async_object))
    connection = client._connection
    if not getattr(connection, "armed", True):
        return None  # the thread is sending and looks at the queue again before it waits
    connection.armed = False
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a thread of its own (kazoo's synchronous methods): now
        _wake(client, request, async_object)
    else:
        loop.call_soon(_wake, client, request, async_object)
    return None


def _wake(client: Any, request: Any, async_object: Any) -> None:
    """Write the byte that wakes the connection thread.

    From an event loop, once the turn that queued ``request`` ends: the requests made in one
    turn (a wave of claims answered together makes dozens) then go to the thread together,
    in one wake-up and one write. Woken at the first of them, the thread took the GIL from
    the loop, sent what was queued so far and waited again, to be woken by the next request
    of the same turn: a wake-up byte, a GIL hand-over and a write each time.

    If the byte cannot be written (the client is closing: its socket pair is gone or
    closed), the request is failed here only if it is still queued, taken out first. By the
    time a deferred wake-up runs, kazoo may have failed everything queued as the connection
    closed, or the thread may have taken the request: answered twice, a request gave its
    slot back twice (``ZkBridge``). The next request tries to wake the thread again."""
    connection = client._connection
    try:
        connection._write_sock.send(b"\0")
    except Exception:  # a race with close(), as kazoo guards it (None or closed)
        connection.armed = True
        try:
            client._queue.remove((request, async_object))
        except ValueError:
            return  # taken, and answered, by whoever took it
        async_object.set_exception(ConnectionClosedError("Connection has been closed"))
