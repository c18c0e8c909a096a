"""A failure of a Topic's reconciliation or deletion whose reason may go away by itself."""

from __future__ import annotations


class TransientError(Exception):
    """Reconciliation failed for a reason that may go away (ZooKeeper or the API server
    unreachable); the status says so and the caller retries later."""
