"""A short nemesis run (about a minute of random faults) with the whole history checked.

``HEDWIG_NEMESIS_DURATION`` (seconds) and ``HEDWIG_NEMESIS_SEED`` change it; ``make nemesis``
runs a long one. The seed and the summary are printed (``pytest -s``, or on failure).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from tests.failure.history import check
from tests.failure.lab.netns import Lab
from tests.failure.nemesis import run_nemesis

DURATION = float(os.environ.get("HEDWIG_NEMESIS_DURATION", "60"))

pytestmark = [pytest.mark.integration, pytest.mark.timeout(DURATION + 300)]


async def test_nemesis_short_run(lab: Lab, lab_dir: Path) -> None:
    seed = int(os.environ.get("HEDWIG_NEMESIS_SEED") or random.randrange(1 << 32))
    print(f"nemesis seed {seed} (HEDWIG_NEMESIS_SEED={seed} replays it)")
    report = await run_nemesis(lab, lab_dir, DURATION, seed)
    print(report.summary())
    assert report.history is not None
    assert report.injections, "the nemesis injected nothing"
    check(report.history)  # a failure shows the seed and the summary above
