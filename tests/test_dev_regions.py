"""``hedwig dev up --regions 2``: two linked regions on this machine, as a user starts them; a
message published in one is read in the other, each once, and ``dev down`` stops both."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hedwig.client import HedwigClient
from tests import scratch
from tests.test_cli import Cli, down
from tests.waiting import eventually, poll

pytestmark = pytest.mark.integration


@pytest.fixture
def two_regions() -> Iterator[tuple[Cli, dict[str, str]]]:
    """``dev up --regions 2 --hubs 1`` running: the commands that find it, and each region's
    hubs, by name, from its READY line."""
    state = Path(scratch.mkdtemp("cli-regions-")) / "dev.json"
    cli = Cli(state)
    log_path = state.parent / "up.log"
    with open(log_path, "w+b") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "hedwig", "dev", "up", "--regions", "2", "--hubs", "1"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cli.env,
        )
        try:

            def both_ready() -> bool:
                assert up.poll() is None, log_path.read_text()
                return log_path.read_text().count("READY region=") == 2

            poll(both_ready, 90, what="both regions ready")
            yield cli, dict(re.findall(r"READY region=(\w+) hubs=(\S+)", log_path.read_text()))
        finally:
            down(cli, up)
    assert not state.exists(), "dev up left its state file behind"


def test_the_commands_take_the_region(two_regions: tuple[Cli, dict[str, str]]) -> None:
    """``hedwig pub --region b`` publishes in b; ``hedwig sub --region a`` reads it in a."""
    cli, _ = two_regions
    published = cli("pub", "--region", "b", "dev/cli", input="hello from b\n")
    assert published.returncode == 0, published.stderr
    got = cli("sub", "--region", "a", "dev/cli", "r", "--earliest", "--count", "1")
    assert got.returncode == 0, got.stderr
    assert got.stdout.split("\t")[-1].strip() == "hello from b"
    # a's hub replicates dev/cli from b, and says so.
    listed = cli("links", "--region", "a", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = json.loads(listed.stdout)
    assert [(r["region"], r["linked"]) for r in rows] == [("a", "b")]
    assert rows[0]["topics"] >= 1 and rows[0]["replicated"] >= 1


async def test_two_linked_regions_deliver_across(
    two_regions: tuple[Cli, dict[str, str]],
) -> None:
    _, hubs = two_regions
    assert set(hubs) == {"a", "b"}
    async with (
        HedwigClient(hubs["a"], publisher_id="pa") as ca,
        HedwigClient(hubs["b"], publisher_id="pb") as cb,
    ):
        sub = await cb.subscribe("dev/t", "reader")
        await ca.publish("dev/t", b"from a")
        await cb.publish("dev/t", b"from b")
        got = {(await sub.next(30)).value for _ in range(2)}
        assert got == {b"from a", b"from b"}

        async def in_a() -> bool:
            answer = await ca.read("dev/t", 1)
            seen = [(m.publisher_id, m.value) for b in answer.batches for m in b.delivered()]
            return sorted(seen) == [("@b/pb", b"from b"), ("pa", b"from a")]

        await eventually(in_a, what="b's message in a, once")
