"""Hedwig's Grafana dashboard, generated from code.

One dashboard, "Hedwig / Load", for the hubs of every HubPool: traffic per hub, topics per
hub, imbalance, topic moves by reason, time without an owner, publish latency, subscriber
backlog, ledger replication and ZooKeeper sessions. The panels are data (``ROWS``) so the
same queries serve three readers:

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
from dataclasses import dataclass, field
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

ROOT = Path(__file__).resolve().parents[1]
OUTPUT = ROOT / "charts" / "hedwig" / "dashboards" / "hedwig-load.json"

UID = "hedwig-load"
TITLE = "Hedwig / Load"
#: Label matchers every query carries: the dashboard's namespace and pool variables.
SEL = 'namespace=~"$namespace", pool=~"$pool"'
#: Variables a query may use, and what they stand for outside Grafana (the tests).
VARIABLES = ("$namespace", "$pool", "$__rate_interval")
#: Window of the sparse histograms and counters (moves, ownerless time, repairs): events are
#: rare, so a longer window than the rate interval keeps them visible.
EVENT_WINDOW = "5m"


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclass(frozen=True)
class Panel:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"  # Grafana unit id: short, ops, Bps, s, percentunit, ...
    width: int = 12  # of 24 columns
    height: int = 8
    stack: bool = False
    decimals: int | None = None
    min: float | None = 0
    thresholds: tuple[tuple[float, str], ...] = field(default=())


def q(expr: str, legend: str) -> Query:
    return Query(" ".join(expr.split()), legend)


def event_increase(metric: str, by: str, window: str = EVENT_WINDOW) -> str:
    """Events counted by a labelled counter over ``window``. The hubs create every label value
    at 0 when they start, so ``increase()`` sees the first event too."""
    return f"sum by ({by}) (increase({metric}_total{{{SEL}}}[{window}]))"


def hub_load(sel: str = SEL) -> str:
    """Each hub's load as the rebalancing policy sees it: EWMA messages/s in plus out."""
    return f'sum by (namespace, pool, pod) (hedwig_hub_rate{{{sel}, unit="messages"}})'


ROWS: tuple[tuple[str, tuple[Panel, ...]], ...] = (
    (
        "Traffic per hub",
        (
            Panel(
                "Messages in per hub",
                "Messages published and stored by each hub (the owners of their topics).",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_messages_in_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
                stack=True,
            ),
            Panel(
                "Messages out per hub",
                "Messages delivered to subscribers by each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_messages_out_total{{{SEL}}}"
                        "[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
                stack=True,
            ),
            Panel(
                "Bytes in per hub",
                "Payload bytes published to each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_bytes_in_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="Bps",
                width=6,
                stack=True,
            ),
            Panel(
                "Bytes out per hub",
                "Payload bytes delivered by each hub.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_bytes_out_total{{{SEL}}}[$__rate_interval]))",
                        "{{pod}}",
                    ),
                ),
                unit="Bps",
                width=6,
                stack=True,
            ),
        ),
    ),
    (
        "Placement and balance",
        (
            Panel(
                "Topics per hub",
                "Topics each hub owns.",
                (q(f"sum by (pod) (hedwig_topics_owned{{{SEL}}})", "{{pod}}"),),
                width=6,
                decimals=0,
            ),
            Panel(
                "Hub load (policy view)",
                "Each hub's EWMA messages/s in plus out, from its load report: the numbers "
                "the rebalancing policy (hubs or operator) balances.",
                (q(hub_load(), "{{pod}}"),),
                unit="ops",
                width=6,
            ),
            Panel(
                "Imbalance",
                "Busiest hub's load over the pool's mean load: 1 is perfectly balanced. "
                "The HedwigHubImbalance alert fires above its ratio (1.5 by default).",
                (
                    q(
                        f"max by (namespace, pool) ({hub_load()}) "
                        f"/ avg by (namespace, pool) ({hub_load()})",
                        "{{pool}}",
                    ),
                ),
                width=6,
                min=1,
                thresholds=((1.5, "orange"),),
            ),
            Panel(
                "Topic moves by reason",
                "Topics handed over gracefully (by reason: rebalancing, a move request, a hub "
                "shutting down) and topics lost without a hand-off (ZooKeeper session loss), "
                f"per {EVENT_WINDOW}.",
                (
                    q(event_increase("hedwig_topic_releases", "reason"), "handed over: {{reason}}"),
                    q(event_increase("hedwig_topic_losses", "reason"), "lost: {{reason}}"),
                ),
                width=6,
            ),
        ),
    ),
    (
        "Availability and latency",
        (
            Panel(
                "Time without owner",
                "How long topics waited for a new owner before a hub claimed them (from the "
                "previous owner's hand-off, or its last message after a crash), over "
                f"{EVENT_WINDOW}.",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) (increase("
                        f"hedwig_topic_ownerless_seconds_bucket{{{SEL}}}[{EVENT_WINDOW}])))",
                        f"p{round(p * 100)}",
                    )
                    for p in (0.5, 0.99)
                ),
                unit="s",
                width=6,
            ),
            Panel(
                "Publish latency",
                "From a publish request's arrival to its durable acknowledgement (replicated "
                "to the ack quorum), all hubs of the pool.",
                tuple(
                    q(
                        f"histogram_quantile({p}, sum by (le) (rate("
                        f"hedwig_publish_latency_seconds_bucket{{{SEL}}}[$__rate_interval])))",
                        f"p{round(p * 100)}",
                    )
                    for p in (0.5, 0.95, 0.99)
                ),
                unit="s",
                width=6,
            ),
            Panel(
                "Subscriber backlog (top 10)",
                "Messages published but not yet consumed, per subscription.",
                (
                    q(
                        "topk(10, sum by (topic, subscriber) "
                        f"(hedwig_subscriber_backlog{{{SEL}}}))",
                        "{{topic}} / {{subscriber}}",
                    ),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "Connections per hub",
                "Open client connections.",
                (q(f"sum by (pod) (hedwig_connections{{{SEL}}})", "{{pod}}"),),
                width=6,
                decimals=0,
            ),
        ),
    ),
    (
        "Health",
        (
            Panel(
                "Hubs up",
                "Hubs Prometheus scrapes successfully, and hubs it cannot reach.",
                (
                    q(f'count by (pool) (up{{job="hedwig-hub", {SEL}}} == 1)', "up"),
                    q(f'count by (pool) (up{{job="hedwig-hub", {SEL}}} == 0)', "down"),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "ZooKeeper session state",
                "Hubs per ZooKeeper session state: connected; suspended (no publishes, no "
                "claims until it reconnects); lost (the hub dropped its topics).",
                (
                    q(
                        f"sum by (state) (hedwig_zk_session_state{{{SEL}}})",
                        "{{state}}",
                    ),
                ),
                width=6,
                decimals=0,
            ),
            Panel(
                "Ledger replication",
                "Ledgers left under-replicated after each hub's last audit, and ledgers "
                f"repaired (replicas re-created or caught up) per {EVENT_WINDOW}.",
                (
                    q(
                        f"sum by (pool) (hedwig_ledgers_under_replicated{{{SEL}}})",
                        "under-replicated",
                    ),
                    q(
                        f"sum by (pool) (increase(hedwig_ledger_repairs_total{{{SEL}}}"
                        f"[{EVENT_WINDOW}]))",
                        "repaired",
                    ),
                ),
                width=6,
                thresholds=((1, "red"),),
            ),
            Panel(
                "Storage syncs and redirects",
                "fdatasync calls of the group commit and requests redirected to a topic's "
                "owner, per second.",
                (
                    q(
                        f"sum by (pod) (rate(hedwig_storage_syncs_total{{{SEL}}}"
                        "[$__rate_interval]))",
                        "syncs {{pod}}",
                    ),
                    q(
                        f"sum by (pod) (rate(hedwig_redirects_total{{{SEL}}}[$__rate_interval]))",
                        "redirects {{pod}}",
                    ),
                ),
                unit="ops",
                width=6,
            ),
        ),
    ),
)


def panels() -> list[Panel]:
    return [p for _, row in ROWS for p in row]


def queries() -> list[tuple[str, Query]]:
    """Every (panel title, query) of the dashboard."""
    return [(p.title, query) for p in panels() for query in p.queries]


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
