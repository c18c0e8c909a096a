"""Publishing a hub's dead letters to the dead-letter topic's owner, wherever it is
(``hedwig.hub.serving.dead_letters`` says when a message becomes one, and why publishing it
twice is harmless).

Rules:

- The owner is found as a delivery hub's tail finds one (``hedwig.hub.spreading.tail``): the
  owner record, then redirects (with the redirected flag, so a hub that is chosen claims); a
  topic nobody owns is asked of this hub, which claims it by placement or redirects. The
  owner may be this hub: the same request goes to its own listener, one path for both.
- Hub to hub, through ``HubDialer``: to the owner's internal listener when the region's hubs
  have one, where this hub is known by its hub certificate (``hub:<CN>``), and PUBLISH is
  served to hubs alone. There the internal plane trusts hubs, so the permission is checked
  here, for the subscription's creator, against this hub's copy of the region's rules
  (``permits``): the creator must hold ``publish`` on the dead-letter topic, as it did
  when the subscription was made, and a rule revoked since holds the letters back (they
  wait, unpublished and unacknowledged) instead of letting a subscription publish for a
  principal that no longer may.
- A dead-letter topic deleted since the subscription was made is not made again by a dead
  letter: the letters wait until it exists (one metadata read per batch of letters; dead
  letters are the exception).
- Letters are published each as its own batch under its own publisher id, pipelined on one
  connection; any failure fails the call (``HedwigError``), and the caller publishes them all
  again later: those stored already are answered as duplicates.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from hedwig.clock import Clock
from hedwig.errors import (
    ConnectionLostError,
    ForbiddenError,
    NoSuchTopicError,
    NotResponsibleError,
    TopicMovingError,
)
from hedwig.hub.owning.peers import HubDialer
from hedwig.hub.serving.dead_letters import DeadLetter
from hedwig.metadata.acls import Operation
from hedwig.metadata.managers import MetadataStore
from hedwig.net.connection import HubConnection
from hedwig.protocol import EncodedMessages, Error, Publish, Published
from hedwig.protocol.status import error_from_frame

CONNECT_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 10.0
# Redirects followed per publish before giving up for now.
MAX_REDIRECTS = 3


class DeadLetterPublisher:
    """A ``DeadLetterSink`` for one hub."""

    def __init__(
        self,
        *,
        address: Callable[[], str],
        store: MetadataStore,
        dialer: HubDialer,
        clock: Clock,
        permits: Callable[[str | None, Operation, str], bool],
    ) -> None:
        self._address = address
        self._clock = clock
        self._store = store
        self._dialer = dialer
        self._permits = permits
        self._conns: dict[str, HubConnection] = {}

    async def publish(self, topic: str, owner: str | None, letters: Sequence[DeadLetter]) -> None:
        if not self._permits(owner, Operation.PUBLISH, topic):
            raise ForbiddenError(
                f"principal {owner} may not publish to the dead-letter topic {topic!r}",
                principal=owner or "",
                operation=Operation.PUBLISH.value,
                topic=topic,
            )
        if not await self._store.topics.topic_exists(topic):
            raise NoSuchTopicError(f"dead-letter topic {topic!r} does not exist")
        target, redirected = await self._owner(topic), False
        for _ in range(MAX_REDIRECTS + 1):
            try:
                await self._send(target, topic, letters, redirected)
                return
            except NotResponsibleError as exc:
                target, redirected = exc.owner or self._address(), exc.owner is not None
            except TopicMovingError as exc:
                target, redirected = exc.destination or self._address(), bool(exc.destination)
        raise TopicMovingError(f"dead-letter topic {topic!r}: its owner keeps changing")

    async def _owner(self, topic: str) -> str:
        got = await self._store.ownership.read_owner_info(topic)
        return got.value.address if got is not None else self._address()

    async def _send(
        self, target: str, topic: str, letters: Sequence[DeadLetter], redirected: bool
    ) -> None:
        conn = await self._connection(target)
        try:
            futures = [
                conn.send_nowait(
                    Publish(
                        request_id=conn.next_id(),
                        topic=topic,
                        publisher_id=letter.publisher_id,
                        publisher_seq=1,
                        messages=EncodedMessages.of_messages([letter.published()]),
                        redirected=redirected,
                    )
                )
                for letter in letters
            ]
            answers = await self._clock.wait_for(asyncio.gather(*futures), REQUEST_TIMEOUT_S)
        except TimeoutError:
            self._drop(target)
            raise ConnectionLostError(f"hub {target} did not store dead letters in time") from None
        except ConnectionLostError:
            self._drop(target)
            raise
        for answer in answers:
            if isinstance(answer, Error):
                raise error_from_frame(answer)
            if not isinstance(answer, Published):
                raise ConnectionLostError(f"unexpected answer to PUBLISH: {type(answer).__name__}")

    async def _connection(self, target: str) -> HubConnection:
        conn = self._conns.get(target)
        if conn is not None and not conn.closed:
            return conn
        conn = self._conns[target] = await self._dialer.open(target, CONNECT_TIMEOUT_S)
        return conn

    def _drop(self, target: str) -> None:
        conn = self._conns.pop(target, None)
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        for target in list(self._conns):
            self._drop(target)
