"""A hub's standing with its metadata store, as the owned topics see it: one state machine.

Rules:

- **Connected**: the hub claims topics and serves the ones it owns.
- **Suspended** (the store is out of reach: a ZooKeeper connection lost, an etcd lease refresh
  unanswered): the hub goes on serving its owned topics on their open ledgers (fencing, not
  the session, keeps two hubs from both acknowledging), but claims nothing: claims are refused
  at once, and the client tries another hub. Meanwhile it asks other hubs every
  ``WITNESS_CHECK_S`` whether the store has ended its session (``hedwig.hub.owning.witnesses``)
  and, past the session timeout, asks the replicas of the topics it serves to readers whether
  another hub fenced their ledgers (that hub took them over) every ``FENCING_CHECK_S``, and
  drops those.
- **Over** (the store said the session expired, or a witness reading the store found it over):
  every topic is dropped, and the hub claims nothing until a new session is up (on etcd, for
  as long as etcd is out of reach).
- A new session (``CONNECTED``) makes it connected again, whatever it was.

A hub draining or stopping took its own registration out: a witness's "not alive" says nothing
about its session then, so it asks none (``asking`` is false); its topics go to their new
owners once it is back in reach, and the ledgers' fencing covers the meantime.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from enum import Enum

from hedwig.clock import Clock
from hedwig.metadata.managers import SessionState

log = logging.getLogger(__name__)

# While the store is out of reach past the session timeout, how often the hub asks its open
# ledgers' replicas whether another hub has fenced them.
FENCING_CHECK_S = 1.0
# While it is out of reach at all, how often the hub asks other hubs whether the store still
# has its session (``hedwig.hub.owning.witnesses``).
WITNESS_CHECK_S = 0.5


class Standing(Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    OVER = "over"


class Change(Enum):
    """What the state machine does on a transition, besides moving."""

    WATCH = "watch"  # (re)start the clock of the outage, and the watch if it is not running
    END_WATCH = "end watch"  # the outage is over
    DROP_ALL = "drop all"  # every owned topic goes


class Event(Enum):
    """What moves it: the store's session states, and a witness that found the session over."""

    CONNECTED = "connected"
    SUSPENDED = "suspended"
    LOST = "lost"
    WITNESSED_OVER = "witnessed over"


_OF_STORE = {state: Event[state.name] for state in SessionState}

# (standing, event) -> (next standing, changes). An event not in the table for a standing
# leaves it as it is (an outage noticed again once the session is over changes nothing: the
# hub owns nothing then, and claims nothing until a new session).
TABLE: dict[tuple[Standing, Event], tuple[Standing, tuple[Change, ...]]] = {
    (Standing.CONNECTED, Event.SUSPENDED): (Standing.SUSPENDED, (Change.WATCH,)),
    (Standing.SUSPENDED, Event.SUSPENDED): (Standing.SUSPENDED, (Change.WATCH,)),
    (Standing.SUSPENDED, Event.CONNECTED): (Standing.CONNECTED, (Change.END_WATCH,)),
    (Standing.OVER, Event.CONNECTED): (Standing.CONNECTED, (Change.END_WATCH,)),
    (Standing.CONNECTED, Event.LOST): (Standing.OVER, (Change.DROP_ALL,)),
    (Standing.SUSPENDED, Event.LOST): (Standing.OVER, (Change.END_WATCH, Change.DROP_ALL)),
    (Standing.OVER, Event.LOST): (Standing.OVER, (Change.DROP_ALL,)),
    (Standing.SUSPENDED, Event.WITNESSED_OVER): (Standing.OVER, (Change.DROP_ALL,)),
}


class HubStanding:
    """The hub's standing, moved by its store's session events and by its witnesses."""

    def __init__(
        self,
        *,
        clock: Clock,
        session_timeout_s: float,
        drop_all: Callable[[str], None],
        drop_fenced: Callable[[], Awaitable[None]],
        asking: Callable[[], bool],
        topics: Callable[[], int],
    ) -> None:
        self._clock = clock
        self._session_timeout_s = session_timeout_s
        self._drop_all = drop_all
        self._drop_fenced = drop_fenced
        self._asking = asking  # whether this hub may ask witnesses now (not draining)
        self._topics = topics  # how many topics it owns, for the log
        self.standing = Standing.CONNECTED
        self._since: float | None = None  # when the outage began (its last SUSPENDED)
        self._watch: asyncio.Task[None] | None = None
        # Asks other hubs whether the store has ended the session (``witnesses``); until the
        # hub sets it (with its address and epoch), nobody to ask.
        self.session_over: Callable[[], Awaitable[bool]] = _nobody_to_ask

    @property
    def claiming(self) -> bool:
        """Whether the hub may claim topics now."""
        return self.standing is Standing.CONNECTED

    def on_session(self, state: SessionState) -> None:
        self._move(_OF_STORE[state])

    def _move(self, event: Event) -> None:
        was = self.standing
        got = TABLE.get((was, event))
        if got is None:
            return
        self.standing, changes = got
        for change in changes:
            if change is Change.WATCH:
                if was is not Standing.SUSPENDED:
                    log.warning(
                        "metadata store unreachable: serving the %d owned topics on their open "
                        "ledgers (claims wait)",
                        self._topics(),
                    )
                self._since = self._clock.monotonic()
                if self._watch is None or self._watch.done():
                    self._watch = asyncio.get_running_loop().create_task(self._watching())
            elif change is Change.END_WATCH:
                if self._since is not None and event is Event.CONNECTED:
                    log.warning(
                        "the metadata store is reachable again after %.1f s",
                        self._clock.monotonic() - self._since,
                    )
                self._end_watch()
            elif change is Change.DROP_ALL:
                self._drop_all(
                    "metadata session over, as another hub reads the store"
                    if event is Event.WITNESSED_OVER
                    else "metadata session expired (ZooKeeper session or etcd lease)"
                )

    def _end_watch(self) -> None:
        self._since = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    async def _watching(self) -> None:
        """While suspended: the witnesses every ``WITNESS_CHECK_S``; past the session timeout,
        also the fenced ledgers every ``FENCING_CHECK_S``."""
        fencing_at = self._clock.monotonic() + self._session_timeout_s
        while self.standing is Standing.SUSPENDED:
            if self._asking() and await self.session_over() and self.standing is Standing.SUSPENDED:
                log.warning(
                    "another hub finds this hub's metadata session over (its registration is "
                    "gone): dropping its topics"
                )
                self._move(Event.WITNESSED_OVER)
                return
            if self._clock.monotonic() >= fencing_at:
                await self._drop_fenced()
                fencing_at = self._clock.monotonic() + FENCING_CHECK_S
            await self._clock.sleep(WITNESS_CHECK_S)


async def _nobody_to_ask() -> bool:
    return False
