"""A hub's ``alive`` record in its region's registry: made at start, made again after a
session loss, and every startup step waited through a store that cannot be reached.

Rules:

- The record goes in last at start (after the listeners are up), so no hub redirects a client
  here before this one can answer; it carries the hub's id and internal listener
  (``HubLoad``), and the store answers with the session's epoch, which names this hub in its
  owner records.
- A startup step that fails because the store cannot be reached is tried again, pausing from
  ``REREGISTER_RETRY_S`` doubled up to ``REREGISTER_RETRY_MAX_S``, for up to
  ``STARTUP_STORE_WAIT_S``: a hub restarted into a network blip, or while ZooKeeper or etcd
  restarts, waits it out as a running hub does, instead of exiting and leaving its replicas
  down until something restarts it. Every step is safe to repeat: a registration that reached
  the store before the answer was lost replaces its own record.
- A new session after an expiry finds the record gone: it is made again, retried until it
  holds (a store that has just come back can refuse the first attempt, and a hub left
  unregistered stays out of every ensemble and placement for good), unless the hub is
  stopping. A session lost while starting (after registering, say) ends the record made in
  it; the new session's CONNECTED comes before the hub is ready, so that is checked once it is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from hedwig.clock import Clock
from hedwig.errors import MetadataUnavailableError
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.metadata.records import HubLoad

log = logging.getLogger(__name__)

T = TypeVar("T")

# Re-registering after a session loss is retried from this pause, doubled up to the maximum.
REREGISTER_RETRY_S = 0.2
REREGISTER_RETRY_MAX_S = 5.0
# How long a starting hub waits out an unreachable store before it gives up and exits.
STARTUP_STORE_WAIT_S = 120.0


class HubRegistration:
    def __init__(
        self,
        *,
        store: MetadataStore,
        clock: Clock,
        record: Callable[[], tuple[str, HubLoad]],
        registered: Callable[[int], None],
        serving: Callable[[], bool],
        stopping: Callable[[], bool],
    ) -> None:
        self._store = store
        self._clock = clock
        self._record = record  # this hub's address and alive record, as they are now
        self._registered = registered  # told the epoch of each registration
        self._serving = serving  # whether the hub is ready (started, not stopping)
        self._stopping = stopping
        self._reregistering = False
        self._lost_while_starting = False
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    async def while_store_away(self, what: str, step: Callable[[], Awaitable[T]]) -> T:
        """Run a startup step, again while the store cannot be reached."""
        deadline = self._clock.monotonic() + STARTUP_STORE_WAIT_S
        return await self._again_while(
            f"starting: {what}",
            step,
            retry_on=MetadataUnavailableError,
            keep_on=lambda delay: self._clock.monotonic() + delay <= deadline,
        )

    async def _again_while(
        self,
        what: str,
        step: Callable[[], Awaitable[T]],
        *,
        retry_on: type[Exception],
        keep_on: Callable[[float], bool],
    ) -> T:
        """``step``, again after each ``retry_on`` failure while ``keep_on(pause)`` holds; the
        failure that ends it is raised."""
        delay = REREGISTER_RETRY_S
        while True:
            try:
                return await step()
            except retry_on as exc:
                if not keep_on(delay):
                    raise
                log.warning("%s failed (again in %.1f s): %s", what, delay, exc)
            await self._clock.sleep(delay)
            delay = min(delay * 2, REREGISTER_RETRY_MAX_S)

    async def register(self) -> int:
        """Write the record; its session's epoch."""
        address, load = self._record()
        epoch = await self._store.hubs.register_hub(address, load)
        self._registered(epoch)
        return epoch

    def started(self) -> None:
        """The hub is ready: register again now if its session was lost while starting."""
        if self._lost_while_starting:
            self._soon(self.reregister())

    def on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST and not self._serving() and not self._stopping():
            self._lost_while_starting = True
        if state is SessionState.CONNECTED and self._serving():
            # A new session after an expiry: our alive record is gone; register again.
            self._soon(self.reregister())

    def _soon(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def reregister(self) -> None:
        """Register again after a session loss, retrying until it holds."""
        if self._reregistering or not self._serving():
            return
        self._reregistering = True
        try:
            await self._again_while(
                "re-registering",
                self._register_if_gone,
                retry_on=Exception,
                keep_on=lambda _: self._serving(),
            )
        except Exception as exc:  # stopping: nothing left to register
            log.info("re-registering given up (hub stopping): %s", exc)
        finally:
            self._reregistering = False

    async def _register_if_gone(self) -> None:
        if not self._serving():
            return  # stopping (or stopped during the pause): registers nothing
        address, _ = self._record()
        hubs = await self._store.hubs.list_hubs()
        if not any(h.address == address and h.alive for h in hubs):
            epoch = await self.register()
            log.info("re-registered after session loss (epoch %d)", epoch)
