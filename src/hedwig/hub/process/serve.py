"""Running a hub as a process: start it, say where it listens on one line of standard
output (what ``hedwig dev`` and the tests read), and stop it gracefully on SIGTERM or SIGINT
(a pod's termination, Ctrl-C)."""

from __future__ import annotations

import asyncio
import signal

from hedwig.hub.process import collector
from hedwig.hub.process.hub import Hub
from hedwig.settings import HubConfig


async def serve(config: HubConfig) -> None:
    """Run a hub until SIGTERM or SIGINT, then stop it gracefully."""
    hub = Hub(config)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await hub.start()
    collector.settle()
    print(
        f"HUB {hub.address} id={hub.hub_id} region={config.connection.region} "
        f"store={config.connection.metadata_url}",
        flush=True,
    )
    await stop.wait()
    await hub.stop()
