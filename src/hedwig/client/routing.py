"""Routing a client's requests: connections to hubs, who owns which topic, redirects, retries.

A request for a topic goes to the hub last known to own it, else to one of the hubs the client
was given (round robin). A NOT_RESPONSIBLE answer names the owner (or the hub chosen to become
it); the request is sent there with the redirected flag, so that hub claims instead of choosing
again. TOPIC_MOVING naming a destination means a hand-off is under way: the request goes there
after a short pause. Other retriable failures (SERVICE_UNAVAILABLE, a lost connection) are
retried with jittered backoff until the retry deadline, which is how a client rides through a
hub failure or a topic move. Everything waits on the injected clock.

A fan-out topic's subscriptions are routed on their own (``routes.SubscriptionRoute``): each to
the delivery hub its redirect or SUBSCRIPTION_MOVED named, falling back to the topic's owner, so
the topic's publishers keep going to the owner while its subscribers spread over the hubs.

A hub this client just failed to reach (the connection could not be opened, or was dropped
because the hub stopped answering) is left alone for ``UNREACHABLE_S``: a redirect to it is
not followed (``OwnerUnreachableError``, shown through ``on_wait``) and requests go to the
other hubs (after the hold too, until it answers again: it is tried last), which keep naming
it the owner until its session ends and a new owner claims the topic. A client cut off from
a healthy owner therefore waits, visibly, for as long as the partition lasts: the hubs cannot
hand the topic to another owner while the owner is alive.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Sequence

from hedwig.client.owners import Owners
from hedwig.client.retry import Backoff, RetryPolicy
from hedwig.client.routes import RouteKey, SubscriptionRoute
from hedwig.clock import Clock
from hedwig.errors import (
    ConnectionLostError,
    DeadlineExceededError,
    HedwigError,
    NotEnoughHubsError,
    NotResponsibleError,
    OutOfOrderError,
    OwnerUnreachableError,
    TlsClosedError,
    TopicMovingError,
)
from hedwig.net.connection import HubConnection
from hedwig.net.transport import Network
from hedwig.protocol import Event, Reply, Request, SubscriptionMoved, TopicMoved
from hedwig.security.credentials import Credentials

# Redirects followed for one attempt before backing off (a topic whose owner keeps changing).
MAX_REDIRECTS = 3
# A hand-off to a named hub takes a few tens of milliseconds: retry there after this pause, at
# most this many times, instead of backing off exponentially.
HAND_OFF_PAUSE_S = 0.01
MAX_HAND_OFF_WAITS = 25
# A hub that could not be reached is not tried again (nor followed in a redirect) for this long,
# doubled with each failure in a row up to UNREACHABLE_MAX_S, until a connection to it opens.
UNREACHABLE_S = 2.0
UNREACHABLE_MAX_S = 16.0
# A hub that failed last time gets this long to accept a new connection, not the full connect
# timeout: behind a partition a connect waits for nothing, and a client that spent five seconds
# on it, while another hub could already take the topic over, would wait out the partition.
SUSPECT_CONNECT_TIMEOUT_S = 1.0
# A TLS connection closed at once is tried again after this pause before it counts as a
# refusal of this end's certificate (``TlsClosedError``).
TLS_RECHECK_PAUSE_S = 0.2

# Builds a request from its request id and the redirected flag.
RequestMaker = Callable[[int, bool], Request]


class Router:
    def __init__(
        self,
        hubs: Sequence[str],
        *,
        retry: RetryPolicy,
        request_timeout_s: float,
        connect_timeout_s: float,
        clock: Clock,
        network: Network,
        on_event: Callable[[HubConnection, Event], None],
        on_close: Callable[[HubConnection], None],
        wait_for_hubs: bool = False,
        on_wait: Callable[[str, HedwigError, float], None] | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.wait_for_hubs = wait_for_hubs
        # Told (topic, why, seconds waited so far) before each backoff: tools show transient
        # waits instead of hanging in silence.
        self.on_wait = on_wait
        # Each new connection authenticates with these (None: a certificate, or anonymous).
        self.credentials = credentials
        self.hubs = list(hubs)
        self.retry = retry
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.clock = clock
        self.network = network
        self._on_event = on_event
        self._on_close = on_close
        self._conns: dict[str, HubConnection] = {}
        self._connecting: dict[str, asyncio.Future[HubConnection]] = {}
        self._owners = Owners()
        self._claim_hints: set[RouteKey] = set()
        self._next_hub = itertools.cycle(range(len(self.hubs)))
        self._unreachable: dict[str, float] = {}
        # Failures in a row per hub (connection lost, gone silent, or not opened).
        self._failures: dict[str, int] = {}

    # connections ------------------------------------------------------------------------------

    async def connection(self, address: str) -> HubConnection:
        """The open connection to ``address``, opened if needed (once, however many ask)."""
        conn = self._conns.get(address)
        if conn is not None and not conn.closed:
            return conn
        pending = self._connecting.get(address)
        if pending is not None:
            return await asyncio.shield(pending)
        fut: asyncio.Future[HubConnection] = asyncio.get_running_loop().create_future()
        self._connecting[address] = fut
        timeout = self.connect_timeout_s
        if self._failures.get(address):
            timeout = min(timeout, SUSPECT_CONNECT_TIMEOUT_S)
        try:
            conn = await HubConnection.open(
                address,
                self._event,
                self._closed,
                network=self.network,
                credentials=self.credentials,
                clock=self.clock,
                timeout=timeout,
            )
        except BaseException as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: waiters get it through shield
            raise
        finally:
            self._connecting.pop(address, None)
        self._conns[address] = conn
        self._failures.pop(address, None)
        fut.set_result(conn)
        return conn

    def close(self) -> None:
        for conn in list(self._conns.values()):
            conn.close()

    def _closed(self, conn: HubConnection) -> None:
        if conn.went_silent:
            self._failed(conn.address)
        if self._conns.get(conn.address) is conn:
            del self._conns[conn.address]
        self._owners.drop_hub(conn.address)
        self._on_close(conn)

    def _event(self, conn: HubConnection, event: Event) -> None:
        if isinstance(event, SubscriptionMoved):
            key = SubscriptionRoute(event.topic, event.subscriber)
            self._owners.pop(key)
            if event.hub:
                self._owners.set(key, event.hub)
                self._claim_hints.add(key)
        if isinstance(event, TopicMoved):
            if self._owners.get(event.topic) == conn.address:
                self._owners.pop(event.topic)
            self._owners.drop_routes(event.topic, conn.address)
            if event.new_owner:
                # The old owner named its successor: go there as a redirected client would,
                # so it claims the topic rather than choosing again.
                self._owners.set(event.topic, event.new_owner)
                self._claim_hints.add(event.topic)
        self._on_event(conn, event)

    # owners -------------------------------------------------------------------------------------

    def owner_of(self, topic: str) -> str | None:
        """The hub this client last saw owning ``topic``."""
        return self._owners.get(topic)

    def _route(self, topic: str, key: RouteKey) -> str:
        owner = self._owners.get(key) or self._owners.get(topic)
        if owner is not None and not self.unreachable(owner):
            return owner
        # Round the hubs, passing over those held off. A hub whose hold ran out but that has
        # not answered since comes last: behind a partition, dialling it costs a connect
        # timeout while the others answer at once (and redirect here if it owns the topic).
        suspect = None
        for _ in range(len(self.hubs)):
            candidate = self.hubs[next(self._next_hub)]
            if self.unreachable(candidate):
                continue
            if not self._failures.get(candidate):
                return candidate
            suspect = suspect or candidate
        if suspect is not None:
            return suspect
        return self.hubs[next(self._next_hub)]  # none is known to answer: try anyway

    def unreachable(self, address: str) -> bool:
        """Whether ``address`` failed to answer this client in the last ``UNREACHABLE_S``."""
        until = self._unreachable.get(address)
        if until is None:
            return False
        if self.clock.monotonic() >= until:
            del self._unreachable[address]
            return False
        return True

    def _failed(self, address: str) -> None:
        if self.unreachable(address):
            return  # one outage: the requests that fail with it do not lengthen the hold
        n = self._failures.get(address, 0) + 1
        self._failures[address] = n
        hold = min(UNREACHABLE_S * 2 ** (n - 1), UNREACHABLE_MAX_S)
        self._unreachable[address] = self.clock.monotonic() + hold

    # requests -----------------------------------------------------------------------------------

    async def topic_request(
        self,
        topic: str,
        make: RequestMaker,
        *,
        deadline_s: float | None = None,
        before_retry: Callable[[], Awaitable[None]] | None = None,
        before_send: Callable[[], Awaitable[None] | None] | None = None,
        route: SubscriptionRoute | None = None,
        on_in_doubt: Callable[[], None] | None = None,
    ) -> tuple[Reply, HubConnection]:
        """Send a topic request to its owner, following redirects and retrying transient errors.

        ``before_retry`` is awaited before every attempt after the first (redirects included):
        ordered publishing uses it to let earlier batches go first. ``before_send`` is called
        before every attempt, once its connection is made, just before the request goes out,
        and what it returns awaited (``None``: nothing to wait for, the usual case, which then
        costs no coroutine).
        ``route``: the subscription under which the hub that answered is remembered (default:
        the topic).
        ``on_in_doubt`` is called when an attempt went out and its answer was lost (the
        connection went, or the hub stopped answering): the hub may have done it.
        """
        key: RouteKey = topic if route is None else route
        policy = self.retry if deadline_s is None else self.retry.with_deadline(deadline_s)
        backoff = Backoff(policy, self.clock)
        # A subscription's request carries the topic's hint too (TOPIC_MOVED names the new
        # owner for the topic): sent there unredirected, the destination chose an owner by
        # placement and could send it to a third hub, which claimed the topic before the
        # hand-off's own claim (the hint stays for the topic's publisher).
        redirected = key in self._claim_hints or (route is not None and topic in self._claim_hints)
        self._claim_hints.discard(key)
        redirects = 0
        hand_off_waits = 0
        out_of_order = 0
        tls_rechecked: set[str] = set()
        address = self._route(topic, key)
        while True:
            try:
                conn = await self.connection(address)
                if before_send is not None and (waiting := before_send()) is not None:
                    await waiting
                try:
                    answer = await conn.request(
                        make(conn.next_id(), redirected), self.request_timeout_s
                    )
                except ConnectionLostError:
                    if on_in_doubt is not None:
                        on_in_doubt()
                    raise
                self._owners.set(key, address)
                if route is not None:
                    # Usually the owner (a single-hub topic); a fan-out topic's delivery hub
                    # redirects the topic's other requests to the owner once.
                    self._owners.setdefault(topic, address)
                return answer, conn
            except NotResponsibleError as exc:
                self._owners.pop(key)
                if exc.owner and self.unreachable(exc.owner):
                    err: HedwigError = OwnerUnreachableError(
                        f"topic {topic!r}: its owner {exc.owner} does not answer this client; "
                        "waiting for it, or for another hub to take the topic over",
                        owner=exc.owner,
                    )
                elif exc.owner and redirects < MAX_REDIRECTS:
                    redirects += 1
                    address, redirected = exc.owner, True
                    if before_retry is not None:
                        await before_retry()
                    continue
                else:
                    err = exc
            except OutOfOrderError as exc:
                # The owner is right; an earlier batch has not reached it yet. Once the
                # earlier batches have settled (``before_retry``), send again, to the same hub.
                if before_retry is not None:
                    await before_retry()
                out_of_order += 1
                if out_of_order > 1 and not await backoff.wait():
                    raise DeadlineExceededError(
                        f"topic {topic!r}: no answer within the retry deadline of "
                        f"{policy.deadline_s:g} s; last error: {exc}"
                    ) from exc
                continue
            except TlsClosedError:
                if address in tls_rechecked:
                    raise  # closed at once twice: this end's certificate is refused
                tls_rechecked.add(address)
                await self.clock.sleep(TLS_RECHECK_PAUSE_S)
                continue
            except HedwigError as exc:
                if not exc.retriable and not (
                    self.wait_for_hubs and isinstance(exc, NotEnoughHubsError)
                ):
                    raise
                if isinstance(exc, ConnectionLostError):
                    self._failed(address)
                self._owners.pop(key)
                if (
                    isinstance(exc, TopicMovingError)
                    and exc.destination
                    and hand_off_waits < MAX_HAND_OFF_WAITS
                ):
                    # The destination is told to claim as soon as the old owner is done.
                    hand_off_waits += 1
                    redirects = 0
                    address, redirected = exc.destination, True
                    self._owners.set(key, exc.destination)
                    if before_retry is not None:
                        await before_retry()
                    await self.clock.sleep(HAND_OFF_PAUSE_S)
                    continue
                err = exc
            if before_retry is not None:
                # At once, before the backoff sleep: ordered publishing closes its gate here,
                # so no later batch can reach a new owner ahead of this one.
                await before_retry()
            if self.on_wait is not None:
                self.on_wait(topic, err, backoff.elapsed)
            if not await backoff.wait():
                raise DeadlineExceededError(
                    f"topic {topic!r}: no answer within the retry deadline of "
                    f"{policy.deadline_s:g} s; last error: {err}"
                ) from err
            redirects = 0
            redirected = False
            address = self._route(topic, key)
