"""A store's session over a slow link to etcd, then a dead one: shared by the plain and the
secured etcd suites (``test_metadata_etcd``, ``test_metadata_etcd_secured``).

etcd renews a lease when a refresh reaches it, a delay after it was sent, and expires it a
TTL after the last one that did; the session must be over by the store's own clock no later,
or a hub would serve on while another claims its topics. And the session must last on such a
link: its grant once counted from before the connection was made, and it was lost at its
first refresh."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.zookeeper import free_port
from hedwig.metadata import HubInfo, SessionState
from hedwig.metadata.etcd import EtcdMetadataStore
from hedwig.metadata.records import NEW_VERSION
from tests.failure.lab.relay import start_relay

DELAY_S = 1.0  # each way: a fifth of the session's 5 s


async def session_on_a_slow_link_ends_before_its_lease(
    server: EtcdServer, store_at: Callable[[str], EtcdMetadataStore]
) -> float:
    """Start a store through a relay that delays each packet ``DELAY_S`` each way, keep it
    two TTLs, then freeze the relay. Asserts the session lasted on the slow link and ended by
    its clock no later than etcd let its lease go; returns by how much earlier (seconds).
    ``store_at(address)``: the store under test, given the address to reach etcd at."""
    port = free_port()
    relay = start_relay(f"127.0.0.1:{port}", server.address, DELAY_S)
    slow = store_at(f"127.0.0.1:{port}")
    direct = store_at(server.address)
    loop = asyncio.get_running_loop()
    lost: list[float] = []
    try:
        await slow.start()
        await direct.start()
        slow.session.add_listener(
            lambda s: lost.append(loop.time()) if s is SessionState.LOST else None
        )
        # An owner record, on a lease the session refreshes with its own.
        await slow.topics.ensure_topic("slow-link")
        await slow.ownership.write_owner_info("slow-link", HubInfo("127.0.0.1:9", 1), NEW_VERSION)
        await asyncio.sleep(2 * slow.etcd.ttl)  # refreshed over the slow link all along
        assert slow.session.state is SessionState.CONNECTED
        assert not lost, "the session was lost on a link slow by a fifth of its TTL"
        os.kill(relay.pid, signal.SIGSTOP)
        gone: float | None = None
        for _ in range(400):
            if gone is None and await direct.ownership.read_owner_info("slow-link") is None:
                gone = loop.time()
            if gone is not None and lost:
                break
            await asyncio.sleep(0.05)
        assert lost, "the session outlived its lease by its own clock"
        assert gone is not None, "etcd kept the owner record"
        assert lost[0] <= gone, f"the session ended {lost[0] - gone:.2f} s after etcd's lease"
        return gone - lost[0]
    finally:
        relay.kill()
        relay.wait()
        await slow.close()
        await direct.close()
