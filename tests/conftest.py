from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TypeVar

import pytest
from hypothesis import HealthCheck, settings
from kazoo.client import KazooClient

from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.devcluster.zookeeper import ZooKeeperServer
from hedwig.metadata.layout import ROOT
from tests import scratch
from tests.secured_etcd import secured_etcd

# Property tests check what they generate, not how fast: on a machine whose cores other work
# shares, a pause while drawing an input (the first regex compiled, a collector's pass) is the
# machine's, and failed the run as "input generation is slow" or an example's deadline.
settings.register_profile(
    "hedwig", suppress_health_check=[HealthCheck.too_slow], deadline=None, print_blob=True
)
settings.load_profile("hedwig")

# Commands run by tests never find (or disturb) a development cluster of the machine's user.
os.environ.setdefault("HEDWIG_DEV_STATE", os.path.join(scratch.mkdtemp("dev-"), "dev.json"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that needs the real ZooKeeper is an integration test (``make unit`` skips them),
    whether it asks for the server itself or through another fixture."""
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if {"zk_server", "etcd_server", "secured_etcd_server"} & set(fixtures):
            item.add_marker(pytest.mark.integration)


S = TypeVar("S", ZooKeeperServer, EtcdServer)


def _running(server: S) -> Iterator[S]:
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One real ZooKeeper for the whole run; tests separate themselves by region. Secured and
    open regions share it, so ``/hedwig`` is made open first (a secured store that made it
    would close it to every other digest, and to stores without one)."""
    for server in _running(ZooKeeperServer(data_dir=str(tmp_path_factory.mktemp("zk")))):
        zk = KazooClient(hosts=server.address, timeout=10)
        zk.start(timeout=10)
        try:
            zk.ensure_path(ROOT)
        finally:
            zk.stop()
            zk.close()
        yield server


@pytest.fixture(scope="session")
def etcd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    """One real etcd for the whole run (built by ``make etcd``); tests separate by region."""
    yield from _running(EtcdServer(data_dir=str(tmp_path_factory.mktemp("etcd"))))


@pytest.fixture(scope="session")
def secured_etcd_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[DevSecurity, EtcdServer]]:
    """One real etcd secured as in production (``tests/secured_etcd.py``) for the whole run."""
    security, server = secured_etcd(str(tmp_path_factory.mktemp("etcd-secured")))
    yield security, server
    server.stop()


@pytest.fixture
def region(request: pytest.FixtureRequest) -> str:
    """A region name unique to the test, so tests share ZooKeeper without sharing state."""
    name = request.node.name.replace("[", "-").replace("]", "")
    return f"{name}-{os.getpid()}"[:200]
