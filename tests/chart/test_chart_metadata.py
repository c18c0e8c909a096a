"""Chart.yaml says what the chart holds: its ``hedwig.io/crds`` annotation names every CRD in
its crds/, no more and no fewer."""

from __future__ import annotations

import yaml

from tests.chart.tools import CHART


def test_the_crds_annotation_names_every_crd_the_chart_installs() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    named = [n.strip() for n in chart["annotations"]["hedwig.io/crds"].split(",")]
    shipped = sorted(
        yaml.safe_load(p.read_text())["metadata"]["name"] for p in (CHART / "crds").glob("*.yaml")
    )
    assert sorted(named) == shipped
    assert len(shipped) == 4
