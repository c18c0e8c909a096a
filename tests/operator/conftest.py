"""Unit tests of the operator (``operator/hedwig_operator``): builders, specs, reconcilers.

The operator package lives outside ``src/`` (it is its own image); put its directory on the
path. Nothing here needs a cluster, ZooKeeper or kopf's runtime: reconcilers are called with an
in-memory metadata store and a fake Kubernetes API (``fakes.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

OPERATOR_DIR = Path(__file__).resolve().parents[2] / "operator"
if str(OPERATOR_DIR) not in sys.path:
    sys.path.insert(0, str(OPERATOR_DIR))
