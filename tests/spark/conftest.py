"""Fixtures for the Spark tests: one local Spark session and one hub cluster per run.

Starting Spark costs 5-7 s and a cluster about one, so both are shared by every Spark test;
tests keep apart by using topics of their own (``topic`` fixture). Every test here is marked
``spark``; those that need hubs are marked ``integration`` too (``make unit`` skips them).

``hedwig_spark`` is installed (``make venv``), which is how Spark's Python workers find it;
the jobs and the traffic model are imported from ``spark-apps/`` (pytest's ``pythonpath``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from hedwig.devcluster.cluster import DevCluster

UNIT_MODULES = {"test_options", "test_fetch"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)
            if Path(str(item.fspath)).stem not in UNIT_MODULES:
                item.add_marker(pytest.mark.integration)


@pytest.fixture(scope="session")
def spark_cluster() -> Iterator[DevCluster]:
    """Three hubs and a ZooKeeper, shared by the Spark tests."""
    with DevCluster(hubs=3, region=f"spark-{uuid.uuid4().hex[:8]}") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    from hedwig_spark import local_session

    session = local_session("hedwig-tests", extra={"spark.ui.showConsoleProgress": "false"})
    yield session
    session.stop()


@pytest.fixture
def hubs(spark_cluster: DevCluster) -> str:
    return ",".join(spark_cluster.addresses)


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test uses."""
    return f"{request.node.name[:60]}-{uuid.uuid4().hex[:6]}".replace("[", "-").replace("]", "")
