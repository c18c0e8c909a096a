"""Reading a topic served by lanes: the topic's subscription follows its lanes by itself.

A topic served by lanes (``hedwig.metadata.plans``) is read lane by lane. The subscription of
the topic (lane 0) asks which lanes there are (DESCRIBE_LANES) when it subscribes, after every
re-subscription, and whenever a hub says they changed (LANES_CHANGED), and subscribes to each
lane it does not read yet, with the same name. Each lane is a subscription of its own, with
its own consume mark; their messages go into the topic's inbox, each tagged with its lane
(``DeliveredMessage.lane``), in each lane's order; there is no order across lanes. A lane
dropped from the plan (sealed, and read to its end by its readers) is closed and forgotten.

One look at a time: a change told while a look is under way makes it look once more when it
is done. A look that fails is retried with backoff, for as long as the subscription lives,
unless the failure is one retrying cannot mend (then ``next`` raises it).

The client files every lane's subscription with its own (``registry``), so what hubs push about
a lane reaches the lane's subscription.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from hedwig.client.retry import Backoff
from hedwig.client.routing import Router
from hedwig.client.subscribing.inbox import Inbox
from hedwig.errors import DeadlineExceededError, HedwigError
from hedwig.protocol import DescribeLanes, Lanes

if TYPE_CHECKING:
    from hedwig.client.subscribing.subscriber import Subscriber


class LaneFollowing:
    """The lane-following part of ``Subscriber``."""

    topic: str
    name: str
    error: HedwigError | None
    _router: Router
    _inbox: Inbox
    _closed: bool
    # The client's registry of subscriptions, which lanes are added to (True) and removed
    # from (``None``: lanes are not followed, as by a lane's own subscription).
    _registry: Callable[[Subscriber, bool], None] | None
    _lanes: dict[int, Subscriber]
    _lanes_task: asyncio.Task[None] | None
    _lanes_again: bool
    lanes_generation: int

    @property
    def lanes(self) -> dict[int, Subscriber]:
        """The subscriptions of the topic's other lanes this one reads, by lane."""
        return dict(self._lanes)

    def _lane_subscriber(self, index: int) -> Subscriber:
        """A subscription of lane ``index``, not attached yet (``Subscriber`` makes it)."""
        raise NotImplementedError

    async def follow_lanes(self) -> None:
        """Read every lane the topic has now (subscribing to each not read yet); later
        changes are followed by themselves."""
        answer, _ = await self._router.topic_request(
            self.topic, lambda rid, _: DescribeLanes(request_id=rid, topic=self.topic)
        )
        assert isinstance(answer, Lanes)
        if self._closed:
            return
        self.lanes_generation = answer.generation
        wanted = {x.index for x in answer.lanes if x.index}
        for index in sorted(set(self._lanes) - wanted):
            # Dropped from the plan: its readers had finished it.
            gone = self._lanes.pop(index)
            await gone.close()
            if self._registry is not None:
                self._registry(gone, False)
        for index in sorted(wanted - set(self._lanes)):
            child = self._lane_subscriber(index)
            self._lanes[index] = child
            assert self._registry is not None
            self._registry(child, True)
            try:
                await child.attach(force=True)
            except HedwigError as exc:
                if not exc.retriable and not isinstance(exc, DeadlineExceededError):
                    raise
                child._lost(f"could not attach: {exc}")  # it goes on trying by itself

    def on_lanes_changed(self) -> None:
        """A hub says the lanes changed (or they may have): look again, once at a time."""
        if self._registry is None or self._closed:
            return
        if self._lanes_task is not None and not self._lanes_task.done():
            self._lanes_again = True
            return
        self._lanes_task = asyncio.get_running_loop().create_task(self._follow_again())

    async def _follow_again(self) -> None:
        router = self._router
        backoff = Backoff(router.retry, router.clock)
        while not self._closed:
            self._lanes_again = False
            try:
                await self.follow_lanes()
            except HedwigError as exc:
                if not exc.retriable and not isinstance(exc, DeadlineExceededError):
                    self.error = exc
                    self._inbox.put(exc)
                    return
                if not await backoff.wait():
                    backoff = Backoff(router.retry, router.clock)
                continue
            if not self._lanes_again:
                return
