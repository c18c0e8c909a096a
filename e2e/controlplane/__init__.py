"""Real Kubernetes control-plane test bed: see README.md and cluster.py."""

from .cluster import ControlPlane, ControlPlaneError, bin_dir, free_port, versions

__all__ = ["ControlPlane", "ControlPlaneError", "bin_dir", "free_port", "versions"]
