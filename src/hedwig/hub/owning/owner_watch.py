"""Watching the owner records of the topics this hub owns, and giving one up.

Once owned, the hub knows it still owns a topic from its session and a watch on the topic's
owner record, not by reading the record on every request. When a watch fires the record is
read again (``OWNER_CHECKS_AT_ONCE`` at a time: a watch stream that breaks fires every watch
of the hub at once, and etcd also cancels, at a compaction, the watches it had not caught up
yet; a task each for 300,000 owned topics took gigabytes): still ours, it is watched again;
gone or another's, the topic is lost at once. A read that fails (the store out of reach)
watches again and leaves it to the session's listener.

A record is given up (deleted, version-checked) when the topic's log failed here, so that other
hubs stop sending clients here and one of them claims the topic, instead of waiting for this
hub's session to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from hedwig.errors import BadVersionError, HedwigError, MetadataError, NoTopicOwnerInfoError
from hedwig.metadata.managers import MetadataStore
from hedwig.metadata.records import HubInfo, Version

log = logging.getLogger(__name__)

# Owner records checked at once after their watches fired.
OWNER_CHECKS_AT_ONCE = 256


class OwnerWatch:
    def __init__(
        self,
        store: MetadataStore,
        *,
        serving: Callable[[str], bool],
        me: Callable[[], HubInfo],
        lost: Callable[[str, str | None], None],
    ) -> None:
        self._store = store
        self._serving = serving  # whether this hub serves the topic (owned and open)
        self._me = me  # this hub's address and epoch, as its own records name it
        self._lost = lost  # told (topic, new owner or None) when the record is not ours
        self._on_fired = self.fired  # one bound method for every owner watch
        # Topics whose owner-record watch fired, checked ``OWNER_CHECKS_AT_ONCE`` at a time.
        self.to_check: dict[str, None] = {}
        self._checking: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # the loop keeps only weak references

    def watch(self, topic: str, version: Version | None = None) -> None:
        self._store.ownership.watch_owner(topic, self._on_fired, version)

    def fired(self, topic: str) -> None:
        """A topic's owner-record watch fired: check the record soon (with the others)."""
        self.to_check[topic] = None
        if self._checking is None or self._checking.done():
            self._checking = asyncio.get_running_loop().create_task(self._check_all())

    async def _check_all(self) -> None:
        while self.to_check:
            batch = []
            for topic in self.to_check:
                batch.append(topic)
                if len(batch) == OWNER_CHECKS_AT_ONCE:
                    break
            for topic in batch:
                del self.to_check[topic]
            await asyncio.gather(*(self._check(t) for t in batch), return_exceptions=True)

    async def _check(self, topic: str) -> None:
        if not self._serving(topic):
            return
        try:
            got = await self._store.ownership.read_owner_info(topic)
        except MetadataError:
            # Disconnected: the session listener decides what happens.
            self.watch(topic)
            return
        if got is not None and got.value == self._me():
            self.watch(topic, got.version)
            return
        self._lost(topic, got.value.address if got is not None else None)

    def give_up(self, topic: str, version: Version) -> None:
        """Delete this hub's owner record of ``topic`` (version ``version``) soon."""
        task = asyncio.get_running_loop().create_task(self._give_up(topic, version))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _give_up(self, topic: str, version: Version) -> None:
        try:
            await self._store.ownership.delete_owner_info(topic, version)
            log.info("topic %r: gave its owner record up (its log failed here)", topic)
        except (BadVersionError, NoTopicOwnerInfoError):
            pass  # a new owner already replaced it (it fenced our ledger)
        except HedwigError as exc:
            log.info("topic %r: could not give the owner record up: %s", topic, exc)
