"""A hub's id lives with its data directory (``hedwig.hub.process.identity``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hedwig.errors import NotEnoughReplicasError, UsageError
from hedwig.hub.process.identity import load_hub_id
from hedwig.ledger.remote import RemoteStorage
from hedwig.ledger.replicas import LocalFirstReplicas
from hedwig.ledger.storage import LocalStorage
from tests.memory_region import memory_region


def test_an_id_is_made_once_and_kept(tmp_path: Path) -> None:
    first = load_hub_id(tmp_path)
    assert first.startswith("hub-") and ":" not in first
    assert load_hub_id(tmp_path) == first
    assert load_hub_id(tmp_path, first) == first


def test_a_given_id_is_written_on_an_empty_directory(tmp_path: Path) -> None:
    assert load_hub_id(tmp_path / "new", "hedwig-main-2") == "hedwig-main-2"
    assert (tmp_path / "new" / "hub-id").read_text().strip() == "hedwig-main-2"


def test_another_hubs_directory_is_refused(tmp_path: Path) -> None:
    load_hub_id(tmp_path, "hedwig-main-0")
    with pytest.raises(UsageError, match="belongs to hub 'hedwig-main-0'"):
        load_hub_id(tmp_path, "hedwig-main-1")


@pytest.mark.parametrize("bad", ["127.0.0.1:4080", "", "-x", "a" * 64, "a/b"])
def test_an_id_is_never_an_address_or_a_path(tmp_path: Path, bad: str) -> None:
    with pytest.raises(UsageError):
        load_hub_id(tmp_path, bad)


def test_a_corrupt_id_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "hub-id").write_text("127.0.0.1:4080\n")
    with pytest.raises(UsageError, match="no valid hub id"):
        load_hub_id(tmp_path)


async def test_the_hub_serves_replicas_named_by_its_id_from_its_disk(tmp_path: Path) -> None:
    """The local replica is the one named by the hub's id: reaching it never resolves an
    address (which changes when the hub moves)."""
    hub_id = load_hub_id(tmp_path)

    async def unreachable(member: str) -> str:
        raise AssertionError(f"resolved {member}: the local replica went over the network")

    local = LocalStorage(tmp_path, hub_id)
    replicas = LocalFirstReplicas(local, resolve=unreachable)
    assert replicas.node(hub_id) is local
    assert replicas.preferred(["hub-other", hub_id]) == [hub_id, "hub-other"]


async def test_a_hub_at_a_reused_address_is_not_taken_for_the_replica_that_was_there() -> None:
    """A directory that still maps a dead hub's id to its address reaches whatever hub listens
    there now. That hub refuses to be taken for it (WRONG_REPLICA, at the connection's first
    request): its empty disk must never answer for the dead hub's replicas (a recovery would
    take an entry it lacks for one never written)."""
    async for region in memory_region(2):
        hub = region.hubs[1]
        reused = hub.address

        async def stale(_member: str, reused: str = reused) -> str:
            return reused  # the dead hub's last address, where ``hub`` listens now

        for member, works in ((hub.hub_id, True), ("hub-gone0000", False)):
            forgotten: list[str] = []
            node = RemoteStorage(
                member, network=region.network, resolve=stale, forget=forgotten.append
            )
            try:
                if works:
                    await node.add_entry(7, 0, -1, b"x")
                    assert (await node.read_lac(7, fence=False))[1] == 0
                    continue
                with pytest.raises(NotEnoughReplicasError, match="address was reused"):
                    await node.read_lac(8, fence=True)
                assert forgotten == [member]  # looked up afresh next time
                assert 8 not in hub.storage.ledgers()  # nothing made or fenced for it
            finally:
                node.close()
