"""Hedwig's Grafana dashboard, generated from code.

One dashboard, "Hedwig / Load", for the hubs of every HubPool: traffic per hub, topics per
hub, imbalance, topic moves by reason, time without an owner, publish latency, subscriber
backlog and its growth, request errors, authentication denials, ledger replication and
ZooKeeper sessions. The panels are data (``ROWS``, in ``dashboard_panels``) so the same
queries serve three readers:

- ``python monitoring/dashboards.py`` writes ``charts/hedwig/dashboards/hedwig-load.json``,
  which the chart ships as a ConfigMap for the Grafana sidecar (``--check`` fails when the
  file is stale; tests/chart runs it);
- ``e2e/test_monitoring.py`` evaluates every query against a real Prometheus scraping real
  hubs under load, and fails on any query that returns nothing;
- ``monitoring/render.py`` draws the same panels with matplotlib (docs/load-dashboard.png).

Series are expected to carry ``namespace``, ``pool`` and ``pod`` labels, as the chart's
ServiceMonitor and PodMonitor give them; the hubs' scrape job is ``hedwig-hub``.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path
from typing import Any

# The SDK steers new code to its "v2" dashboard schema (Grafana 12's resource format); Grafana's
# dashboard provisioning and the chart's sidecar ConfigMaps read the classic JSON model, so that
# is what is built here, and the SDK's reminder is silenced.
warnings.filterwarnings("ignore", "Prefer using dashboardv2", DeprecationWarning)

from grafana_foundation_sdk.builders import common as common_b  # noqa: E402
from grafana_foundation_sdk.builders import dashboard as dash  # noqa: E402
from grafana_foundation_sdk.builders import prometheus, timeseries  # noqa: E402
from grafana_foundation_sdk.cog.encoder import JSONEncoder  # noqa: E402
from grafana_foundation_sdk.models import common  # noqa: E402
from grafana_foundation_sdk.models import dashboard as model  # noqa: E402

from dashboard_panels import (  # noqa: E402
    EVENT_WINDOW,
    ROWS,
    SEL,
    VARIABLES,
    Panel,
    Query,
    panels,
    queries,
)

__all__ = ["EVENT_WINDOW", "ROWS", "SEL", "VARIABLES", "Panel", "Query", "panels", "queries"]

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "charts" / "hedwig" / "dashboards" / "hedwig-load.json"

UID = "hedwig-load"
TITLE = "Hedwig / Load"


# ------------------------------------------------------------------------ Grafana JSON model
#
# Built with grafana-foundation-sdk, Grafana's own typed builders (generated from Grafana's
# schemas): field names, enum values and the grid layout come from the library rather than
# from hand-written dictionaries. tests/chart/test_monitoring.py round-trips the output
# through the SDK's models.

DATASOURCE = common.DataSourceRef(type_val="prometheus", uid="${datasource}")


def _panel(panel: Panel) -> timeseries.Panel:
    built = (
        timeseries.Panel()
        .title(panel.title)
        .description(panel.description)
        .datasource(DATASOURCE)
        .span(panel.width)
        .height(panel.height)
        .unit(panel.unit)
        .color_scheme(dash.FieldColor().mode(model.FieldColorModeId.PALETTE_CLASSIC))
        .draw_style(common.GraphDrawStyle.LINE)
        .line_width(1)
        .fill_opacity(20 if panel.stack else 0)
        .stacking(
            common_b.StackingConfig()
            .mode(common.StackingMode.NORMAL if panel.stack else common.StackingMode.NONE)
            .group("A")
        )
        .show_points(common.VisibilityMode.NEVER)
        .span_nulls(False)
        .legend(
            common_b.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.LIST)
            .placement(common.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(
            common_b.VizTooltipOptions()
            .mode(common.TooltipDisplayMode.MULTI)
            .sort(common.SortOrder.DESCENDING)
        )
    )
    if panel.min is not None:
        built = built.min(panel.min)
    if panel.decimals is not None:
        built = built.decimals(panel.decimals)
    if panel.thresholds:
        steps = [model.Threshold(value=None, color="green")]
        steps += [model.Threshold(value=value, color=color) for value, color in panel.thresholds]
        built = built.thresholds(
            dash.ThresholdsConfig().mode(model.ThresholdsMode.ABSOLUTE).steps(steps)
        ).thresholds_style(
            common_b.GraphThresholdsStyleConfig().mode(common.GraphThresholdsStyleMode.DASHED)
        )
    for i, query in enumerate(panel.queries):
        built = built.with_target(
            prometheus.Dataquery()
            .ref_id(chr(ord("A") + i))
            .datasource(DATASOURCE)
            .expr(query.expr)
            .legend_format(query.legend)
            .range()
        )
    return built


def _variable(name: str, label: str, query: str) -> dash.QueryVariable:
    return (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .definition(query)
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .multi(True)
        .all_value(".*")
        .current(model.VariableOption(selected=True, text=["All"], value=["$__all"]))
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )


def build() -> model.Dashboard:
    """The dashboard as the SDK's model (rows and panels laid out by its builder)."""
    board = (
        dash.Dashboard(TITLE)
        .uid(UID)
        .description(
            "Hedwig hubs: traffic, placement, moves, latency, backlog and health "
            "(generated by monitoring/dashboards.py)."
        )
        .tags(["hedwig"])
        .editable()
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("")
        .version(1)
        .with_variable(
            dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
        )
        .with_variable(
            _variable("namespace", "Namespace", "label_values(hedwig_topics_owned, namespace)")
        )
        .with_variable(
            _variable(
                "pool", "Pool", 'label_values(hedwig_topics_owned{namespace=~"$namespace"}, pool)'
            )
        )
    )
    for row_title, row in ROWS:
        board = board.with_row(dash.Row(row_title).collapsed(False))
        for panel in row:
            board = board.with_panel(_panel(panel))
    built = board.build()
    for panel_id, child in enumerate(built.panels or [], start=1):
        child.id_val = panel_id
    return built


def dashboard() -> dict[str, Any]:
    """The dashboard's JSON (Grafana's model), as the chart ships it."""
    return json.loads(json.dumps(build(), cls=JSONEncoder))  # type: ignore[no-any-return]


def render_json() -> str:
    return json.dumps(dashboard(), indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file is out of date")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render_json()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python monitoring/dashboards.py")
            return 1
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
