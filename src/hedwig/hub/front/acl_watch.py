"""Keeps a hub's ACL rules current: read with a watch, read again when it fires.

Every hub reads the region's ACL entries at start and sets one watch over the list and every
entry; whichever changes first fires it, and the hub reads everything again (setting the next
watch). A change therefore reaches every hub within a ZooKeeper round trip or two. A watch is
lost with its session: a new session reads again and sets a new one; and the rules are also
read every ``poll_s`` whatever happens (without piling up watches). A failed
read keeps the rules the hub has (a metadata outage must not turn into "everything allowed" or
"everything denied") and is tried again shortly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from hedwig.clock import Clock
from hedwig.errors import HedwigError
from hedwig.metadata.managers import MetadataStore, SessionState
from hedwig.security.acl import AclSet

log = logging.getLogger(__name__)

POLL_S = 10.0
RETRY_S = 1.0


class AclWatcher:
    def __init__(
        self,
        store: MetadataStore,
        *,
        super_users: frozenset[str],
        on_rules: Callable[[AclSet], None],
        clock: Clock,
        poll_s: float = POLL_S,
    ) -> None:
        self._store = store
        self._super_users = super_users
        self._on_rules = on_rules
        self._clock = clock
        self._poll_s = poll_s
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._watching = False
        store.session.add_listener(self._on_session)

    async def start(self) -> None:
        """Load the rules (the hub serves nobody before this), then keep them current."""
        await self._load()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _fired(self) -> None:
        self._watching = False
        self._changed.set()

    def _on_session(self, state: SessionState) -> None:
        if state is SessionState.LOST:
            self._watching = False
            self._changed.set()

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await self._clock.wait_for(self._changed.wait(), self._poll_s)
            self._changed.clear()
            try:
                await self._load()
            except HedwigError as exc:
                log.warning("reading the ACL rules failed (keeping the current ones): %s", exc)
                await self._clock.sleep(RETRY_S)
                self._changed.set()

    async def _load(self) -> None:
        # Marked armed before the read: its watch may fire before the answer is handled,
        # and ``_fired`` must then leave it disarmed (marking it after the read used to leave
        # the rules watched by nothing, current only at each poll).
        arm = not self._watching
        self._watching = True
        try:
            entries = await self._store.acls.list_acls(watch=self._fired if arm else None)
        except BaseException:
            if arm:
                self._watching = False
            raise
        self._on_rules(
            AclSet({name: v.value for name, v in entries.items()}, super_users=self._super_users)
        )


class NoAclWatch:
    """Authorization off: no rules to read or follow."""

    async def start(self) -> None:
        return None

    def stop(self) -> None:
        return None
