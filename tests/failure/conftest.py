"""Fixtures of the network lab: skip where the machine forbids it, sweep dead runs' leftovers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.failure.lab.netns import Lab, sweep, unavailable_reason


@pytest.fixture(scope="session")
def lab_allowed() -> None:
    reason = unavailable_reason()
    if reason:
        pytest.skip(reason)
    sweep()  # namespaces, links, disks of runs killed before they could clean up


@pytest.fixture
def lab(lab_allowed: None) -> Iterator[Lab]:
    with Lab() as made:
        yield made


@pytest.fixture
def lab_dir(tmp_path: Path) -> Path:
    """Where the cluster's logs go (pytest keeps the last runs' directories)."""
    return tmp_path
