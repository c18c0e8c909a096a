"""Other hubs as witnesses of this hub's metadata session, while it cannot reach the store.

A hub cut off from ZooKeeper cannot tell whether its session is over: ZooKeeper ends it a
session timeout after it last heard from the hub, but the hub learns so only when it gets
through again. Meanwhile it must go on serving the topics it owns, since ZooKeeper itself may
be what is down (an outage stops no publishing: ``hedwig.hub.owning.ownership``). Yet if only this
hub is cut off, the others see its records go and would take its topics over, while its
clients stay with it and it acknowledges on ledgers nobody has fenced: the topics stall for
as long as the cut lasts (nothing is lost: a take-over fences first).

So it asks the other hubs, over the connections of the storage role, which do not go through
the store: each one that can read the registry says whether this hub is still alive in the
session that gave it its epoch (``HubAlive``). One "no" is enough: the store has ended the
session (its ephemeral ``alive`` record goes with it), and the hub drops its topics and
refuses claims as when it learns so itself. A hub that cannot reach the store either, or does
not answer, tells nothing; so while ZooKeeper is down for every hub, nothing changes. A few
hubs, chosen at random, are asked each time, so a whole region cut off from its store does
not ask each hub of each other hub twice a second.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable

from hedwig.hub.owning.peers import PeerDirectory
from hedwig.ledger.replicas import LocalFirstReplicas

# How long a witness has to answer, and how many are asked at a time.
WITNESS_TIMEOUT_S = 1.0
WITNESSES_ASKED = 3


class SessionWitnesses:
    def __init__(
        self,
        *,
        directory: PeerDirectory,
        replicas: LocalFirstReplicas,
        names: Callable[[], tuple[str, ...]],
        rng: random.Random | None = None,
    ) -> None:
        self._directory = directory
        self._replicas = replicas
        self._names = names  # this hub's own: its addresses and id (known once it listens)
        self._rng = rng or random.Random()

    async def session_over(self, address: str, epoch: int) -> bool:
        """Whether a hub that reads the registry now finds ``address`` no longer alive in the
        session of ``epoch``; False when none could tell."""
        members = self._directory.members(besides=self._names())
        if len(members) > WITNESSES_ASKED:
            members = self._rng.sample(members, WITNESSES_ASKED)
        answers = await asyncio.gather(
            *(
                self._replicas.remote(m).hub_alive(address, epoch, WITNESS_TIMEOUT_S)
                for m in members
            )
        )
        return any(a is False for a in answers)
