"""Unit tests of the operator (``operator/hedwig_operator``): builders, specs, reconcilers.

The operator ships in the root distribution, so ``make venv`` installs it. Nothing here needs a
cluster, ZooKeeper or kopf's runtime: reconcilers are called with an in-memory metadata store
and a fake Kubernetes API (``fakes.py``).
"""
