"""How ``make test`` spreads the suite over its workers (pytest-xdist, ``--dist loadgroup``).

Most of the suite waits on real servers (ZooKeeper, etcd, hub processes, a JVM) far more
than it computes, so two workers on two cores finish it in a little more than half the time
of one. What decides where a test runs:

- A test file is one unit: its module-scoped fixtures (a three-hub cluster, a secured
  ZooKeeper) start once, on the worker that runs the file.
- The tests that own the machine run on one worker, one after another, in the ``machine``
  group: everything under ``e2e/`` (one real node per machine: a kubelet, containerd,
  kube-proxy's rules; one control plane) and the network lab (``tests/failure/lab``: it
  sweeps the namespaces and links of runs it does not know, so two labs at once would tear
  each other down), and the image builds (``tests/chart``'s skaffold and built-image tests
  share ``images/build.sh``'s cache with the real node's images). The group goes first, so
  the other worker's many small files fill in beside it instead of the group running alone
  at the end.
- Tests marked ``alone`` compare timings or resident memory, which a second worker's load
  would move: ``make test`` runs them after the parallel part, by themselves
  (``-m alone``).

Without ``-n`` (a single file, a debugger) none of this changes anything but the order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

MACHINE = "machine"
# The network lab's test modules (each uses tests/failure/lab's namespaces).
_LAB_MODULES = {"test_lab.py", "test_partitions.py", "test_nemesis.py"}
# Tests that run images/build.sh (buildah, its cache under ~/.cache/hedwig/images).
_IMAGE_MODULES = {"test_skaffold.py", "test_built_images.py"}
_ROOT = Path(__file__).parent


def _group(item: pytest.Item) -> str:
    path = Path(str(item.path)).resolve()
    relative = path.relative_to(_ROOT) if path.is_relative_to(_ROOT) else path
    if relative.parts[:1] == ("e2e",) or "lab_allowed" in getattr(item, "fixturenames", ()):
        return MACHINE
    if relative.parts[:2] == ("tests", "failure") and relative.name in _LAB_MODULES:
        return MACHINE
    if relative.parts[:2] == ("tests", "chart") and relative.name in _IMAGE_MODULES:
        return MACHINE
    return str(relative)


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle: keep its order within groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))
    items.sort(key=lambda item: _group(item) != MACHINE)  # stable: the machine's tests first
