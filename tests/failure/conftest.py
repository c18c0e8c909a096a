"""Fixtures of the network lab: skip where the machine forbids it, sweep dead runs' leftovers."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from tests.failure.lab.netns import Lab, sweep, unavailable_reason


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session")
def lab_allowed() -> Iterator[None]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    sweep()  # namespaces, links, disks of runs killed before they could clean up
    # A run stopped with SIGTERM (a CI time limit, kill) tears its labs down as on Ctrl-C;
    # one killed with SIGKILL leaves them to the next run's sweep.
    previous = signal.getsignal(signal.SIGTERM)
    if previous == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)
    yield
    if previous == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture
def lab(lab_allowed: None) -> Iterator[Lab]:
    with Lab() as made:
        yield made


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    """Where the cluster's logs go (pytest keeps the last runs' directories)."""
    return tmp_path
