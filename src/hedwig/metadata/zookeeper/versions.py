"""Hedwig's record versions as ZooKeeper's znode versions."""

from __future__ import annotations

from hedwig.metadata.records import ANY_VERSION, Version


def zk_version(version: Version) -> int:
    """The znode version a write requires: ``ANY_VERSION`` is ZooKeeper's -1 (any)."""
    return -1 if version == ANY_VERSION else int(version)
