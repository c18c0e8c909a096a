"""Scratch directories of a test run, all under one directory removed when the run ends.

Tests that need a directory outside pytest's ``tmp_path`` (a module-level helper, a hub made
in a function without fixtures, the development state file every command of the run shares)
take it here, so a run leaves nothing behind in ``/tmp``."""

from __future__ import annotations

import atexit
import shutil
import tempfile

ROOT = tempfile.mkdtemp(prefix="hedwig-test-")
atexit.register(shutil.rmtree, ROOT, True)


def mkdtemp(prefix: str = "hedwig-") -> str:
    return tempfile.mkdtemp(prefix=prefix, dir=ROOT)
