"""Whether any of the hubs a command was given answers, asked once before the command starts.

The client retries a hub it cannot reach until its deadline (30 s by default), which is right
for a hub restarting or a topic moving and wrong for an address that was never a hub's: a
mistyped ``--hub`` (nothing listening, a host that does not resolve, a metrics or ZooKeeper
port) waited half a minute and read like a wait for the topic. So a command first asks every
hub it was given for a PING, all at once, for up to ``PROBE_BUDGET_S``: the first hub that
answers with any frame (an answer, or a refusal: a secured hub refuses an anonymous PING,
which still proves it a hub) lets the command go on, and from then on the client's retries
are the ones that apply. If none answers in the budget the command fails, naming for each
address what was found there:

| found | told |
|---|---|
| the host does not resolve | no such host |
| the connection is refused | nothing listening |
| the connection is made, then closed unanswered | not a Hedwig hub (a metrics, ZooKeeper port) |
| the connection is made, never answered | not a hub (a metrics port), or a frozen one |
| no connection in the budget | no answer (a firewall, or a host that is down) |

A TLS or authentication failure is a hub's answer too: it is left to the command, which
reports it as it always has.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence

from hedwig.clock import Clock, SystemClock
from hedwig.errors import ConnectionLostError, HedwigError, TlsError
from hedwig.net.connection import HubConnection
from hedwig.net.transport import TCP, TcpNetwork
from hedwig.protocol import Ping
from hedwig.security.credentials import ClientSecurity

# Seconds all the given hubs are asked for: longer than a hub's answer to a PING takes on any
# network a user types an address for, short enough that a wrong address fails at once.
PROBE_BUDGET_S = 4.0
# Seconds between attempts at an address that refused: a hub restarting on it comes back.
RETRY_EVERY_S = 0.5


NO_SUCH_HOST = "no such host"
NOT_A_HUB = "it closed the connection unanswered: not a Hedwig hub (a metrics or ZooKeeper port?)"
SILENT = (
    "it took the connection, never answered: not a Hedwig hub (a metrics port?) or a frozen one"
)

# Its warnings (a silent peer dropped) would tell what this module tells, twice.
CONNECTION_LOGGER = "hedwig.net.connection"


def _errors_only(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.ERROR


class HubsUnreachableError(ConnectionLostError):
    """None of the given addresses answered as a hub: ``reasons`` per address."""

    def __init__(self, reasons: dict[str, str]) -> None:
        told = ", ".join(f"{address} ({why})" for address, why in reasons.items())
        super().__init__(f"no Hedwig hub at {told}")
        self.reasons = reasons


def _why(exc: BaseException) -> str:
    """What an address turned out to be, from the error of a connection or a PING."""
    cause = exc.__cause__
    if isinstance(cause, socket.gaierror):
        return NO_SUCH_HOST
    if isinstance(cause, ConnectionRefusedError):
        return f"nothing listening, for {PROBE_BUDGET_S:g} s"
    if isinstance(cause, TimeoutError) or isinstance(exc, TimeoutError):
        return f"no connection in {PROBE_BUDGET_S:g} s (a firewall, or a host that is down?)"
    if isinstance(cause, OSError):
        return str(cause.strerror or cause).lower()
    return NOT_A_HUB


async def _ask(address: str, network: TcpNetwork, clock: Clock, timeout: float) -> None:
    """Return once ``address`` answered a PING with any frame; raise what it did instead
    (``TimeoutError``: connected, and nothing came back in ``timeout``)."""
    conn = await HubConnection.open(address, network=network, clock=clock, timeout=timeout)
    try:
        await clock.wait_for(conn.request(Ping(request_id=conn.next_id()), timeout=None), timeout)
    except ConnectionLostError as exc:
        if conn.went_silent:  # dropped by the connection's keepalive: nothing ever came
            raise TimeoutError(str(exc)) from exc
        raise
    except HedwigError:
        return  # a refusal: a hub's answer all the same
    finally:
        conn.close()


async def _probe(address: str, network: TcpNetwork, clock: Clock, deadline: float) -> str | None:
    """None once ``address`` answers; else why not, when the budget is spent."""
    why = "no answer"
    while (left := deadline - clock.monotonic()) > 0:
        try:
            await _ask(address, network, clock, left)
            return None
        except TlsError:
            return None  # a TLS listener: the command's own connection says what failed
        except TimeoutError:
            return SILENT
        except ConnectionLostError as exc:
            why = _why(exc)
            if why in (NOT_A_HUB, NO_SUCH_HOST):
                return why  # it will not turn into a hub by waiting
        await clock.sleep(min(RETRY_EVERY_S, max(0.0, deadline - clock.monotonic())))
    return why


async def check_hubs(
    hubs: Sequence[str], security: ClientSecurity, clock: Clock | None = None
) -> None:
    """Return as soon as one of ``hubs`` answers; ``HubsUnreachableError`` if none does."""
    network = TcpNetwork(client_tls=security.tls) if security.tls is not None else TCP
    quiet = not logging.getLogger(__name__).isEnabledFor(logging.DEBUG)
    if quiet:
        logging.getLogger(CONNECTION_LOGGER).addFilter(_errors_only)
    try:
        await _check(hubs, network, clock or SystemClock())
    finally:
        if quiet:
            logging.getLogger(CONNECTION_LOGGER).removeFilter(_errors_only)


async def _check(hubs: Sequence[str], network: TcpNetwork, clock: Clock) -> None:
    deadline = clock.monotonic() + PROBE_BUDGET_S
    tasks = {asyncio.ensure_future(_probe(h, network, clock, deadline)): h for h in hubs}
    reasons: dict[str, str] = {}
    try:
        for done in asyncio.as_completed(tasks):
            why = await done
            if why is None:
                return
    finally:
        for task in tasks:
            task.cancel()
    for task, address in tasks.items():
        if task.done() and not task.cancelled():
            reasons[address] = task.result() or "no answer"
    raise HubsUnreachableError(reasons)
