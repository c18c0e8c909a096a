"""Fixtures of the fault scenarios: the clusters they run on (``clusters.py``), plain or
secured, named for the test module (a module's own ``cluster`` fixture, as on etcd, takes
precedence); and of the network lab: skip where the machine forbids it, sweep dead runs'
leftovers."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType

import pytest

from hedwig.devcluster.cluster import DevCluster
from tests.failure.clusters import cluster_332
from tests.failure.lab.netns import Lab, sweep, unavailable_reason


def _region(request: pytest.FixtureRequest, secure: bool) -> str:
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_")
    return f"{name}-secure" if secure else name


@pytest.fixture
def cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    with cluster_332(tmp_path, _region(request, False)) as c:
        yield c


@pytest.fixture
def secure_cluster(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    with cluster_332(tmp_path, _region(request, True), secure=True) as c:
        yield c


@pytest.fixture(params=[False, True], ids=["plain", "secure"])
def plain_or_secure(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[DevCluster]:
    """A scenario run on both."""
    secure: bool = request.param
    with cluster_332(tmp_path, _region(request, secure), secure=secure) as c:
        yield c


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
