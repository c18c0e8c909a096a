"""Helpers for tests that run real hubs: make one, wait for conditions (``tests.waiting``),
read the store, run the CLI."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from hedwig.hub import Hub, HubConfig
from hedwig.metadata import read_topic_owner
from hedwig.settings import ConnectionSettings, PlacementSettings, StorageSettings
from tests import scratch
from tests.waiting import eventually

__all__ = ["eventually", "hedwig", "lone_hub", "owner_of"]


def lone_hub(
    store_url: str,
    region: str,
    *,
    session_timeout_s: float | None = None,
    placement: PlacementSettings | None = None,
) -> Hub:
    """A hub of its own on a store: a free port, a fresh data directory, replication 1/1/1
    (it needs no other hub), its store session's timeout and its placement settings if given."""
    connection = ConnectionSettings(metadata_url=store_url, region=region, listen="127.0.0.1:0")
    if session_timeout_s is not None:
        connection = replace(connection, metadata_session_timeout_s=session_timeout_s)
    return Hub(
        HubConfig(
            connection=connection,
            storage=StorageSettings(data_dir=scratch.mkdtemp("hub-"), replication="1/1/1"),
            placement=placement or PlacementSettings(),
        )
    )


# The owner of a topic, read through a store of its own.
owner_of = read_topic_owner


def hedwig(
    *args: str, input: str | None = None, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hedwig", *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
