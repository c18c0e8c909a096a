"""The real node is shared by every test module that runs real pods: starting it (the control
plane, containerd, a kubelet, kube-proxy, CoreDNS, the images imported) takes about 20 s, and
only one can run on a machine at a time."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controlplane.node import RealCluster
from realpods import built_images, node_binaries


@pytest.fixture(scope="session")
def real_cluster() -> Iterator[RealCluster]:
    node_binaries()
    images = built_images("hub", "operator")
    with RealCluster(list(images.values())) as rc:
        yield rc
