"""A hub open to the network starts only when told ``--insecure``, and then says it is open.

Real ``hedwig hub`` processes: one told to listen on every interface with no security exits
at once (status 2) naming what is open and what that means; the same told ``--insecure``
starts, logs a warning, answers ``/readyz`` ready with an ``insecure:`` line and sets
``hedwig_hub_insecure`` to 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

from hedwig.devcluster.cluster import DevCluster, HubProcess
from hedwig.devcluster.hosts import Host
from hedwig.devcluster.zookeeper import ZooKeeperServer, free_port


def _hub(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HEDWIG_")}
    return subprocess.run(
        [sys.executable, "-m", "hedwig", "hub", "--data-dir", str(tmp_path / "data"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )


def test_a_hub_open_on_every_interface_does_not_start(tmp_path: Path) -> None:
    # No metadata store is needed: it refuses before connecting to anything.
    done = _hub(
        "--listen", f"0.0.0.0:{free_port()}", "--metadata", "127.0.0.1:1", tmp_path=tmp_path
    )
    assert done.returncode == 2, done.stderr
    assert "refusing to start open to the network" in done.stderr
    assert "the client listener 0.0.0.0:" in done.stderr
    assert "no TLS, no authentication; ledgers served on it too" in done.stderr
    assert "read and delete topics and ledgers" in done.stderr
    assert "--insecure" in done.stderr
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())


def test_an_open_internal_listener_does_not_start_either(tmp_path: Path) -> None:
    done = _hub(
        "--listen",
        "127.0.0.1:0",
        "--internal-listen",
        f"[::]:{free_port()}",
        "--metadata",
        "127.0.0.1:1",
        tmp_path=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    assert "the internal listener [::]:" in done.stderr
    assert "no TLS, no hub CA" in done.stderr


def test_insecure_starts_and_says_it_is_open(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    port = free_port()
    hub = HubProcess(
        zk_server.address,
        f"open-hub-{os.getpid()}",
        str(tmp_path / "hub"),
        port=port,
        extra_args=["--listen", f"0.0.0.0:{port}", "--insecure", "--replication", "1/1/1"],
    )
    hub.start()
    try:
        with urllib.request.urlopen(hub.metrics_url + "/readyz", timeout=5) as r:
            assert r.status == 200
            ready, insecure = r.read().decode().strip().splitlines()
        assert ready == "ready"
        assert insecure.startswith("insecure: open to the network (--insecure):")
        assert f"the client listener 0.0.0.0:{port}" in insecure
        with urllib.request.urlopen(hub.metrics_url + "/metrics", timeout=5) as r:
            metrics = r.read().decode().splitlines()
        assert "hedwig_hub_insecure 1.0" in metrics
    finally:
        hub.stop()
    assert "insecure: open to the network" in hub.tail(200)


def test_a_loopback_hub_is_not_reported_open(zk_server: ZooKeeperServer, tmp_path: Path) -> None:
    hub = HubProcess(
        zk_server.address,
        f"loopback-hub-{os.getpid()}",
        str(tmp_path / "hub"),
        extra_args=["--replication", "1/1/1"],
    )
    hub.start()
    try:
        with urllib.request.urlopen(hub.metrics_url + "/readyz", timeout=5) as r:
            assert r.read().decode().strip() == "ready"
        with urllib.request.urlopen(hub.metrics_url + "/metrics", timeout=5) as r:
            assert "hedwig_hub_insecure 0.0" in r.read().decode().splitlines()
    finally:
        hub.stop()


def test_the_dev_cluster_tells_an_open_hub_off_loopback_it_is(
    zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    """As the failure lab's hubs in network namespaces: a host off loopback, security off."""
    cluster = DevCluster(
        hubs=0,
        region=f"dev-open-{os.getpid()}",
        base_dir=str(tmp_path),
        replication="1/1/1",
        hub_hosts=[Host(address="0.0.0.0")],
    )
    cluster.zk_server = zk_server  # the session's, instead of one of its own
    hub = cluster.add_hub()
    try:
        assert "--insecure" in hub.extra_args
        with urllib.request.urlopen(hub.metrics_url + "/metrics", timeout=5) as r:
            assert "hedwig_hub_insecure 1.0" in r.read().decode().splitlines()
    finally:
        hub.stop()
