"""A static picture of the Hedwig load dashboard, drawn with matplotlib from the dashboard's
own panels and queries (monitoring/dashboards.py) evaluated by a Prometheus.

``fetch`` runs each panel's queries as range queries over the Prometheus HTTP API, with the
dashboard's variables filled in; ``draw`` lays the panels out as the dashboard does (rows of
panels, 24 columns) and writes a PNG. e2e/test_monitoring.py uses both on real hubs under
load; ``make dashboard-picture`` refreshes docs/load-dashboard.png that way.
"""

from __future__ import annotations

import json
import math
import re
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import dashboards

#: One series: its labels and its (unix time, value) points.
Series = tuple[dict[str, str], list[tuple[float, float]]]


@dataclass(frozen=True)
class Variables:
    """What the dashboard's variables stand for in one picture."""

    namespace: str = ".*"
    pool: str = ".*"
    rate_interval: str = "1m"

    def fill(self, expr: str) -> str:
        out = expr.replace("$namespace", self.namespace).replace("$pool", self.pool)
        return out.replace("$__rate_interval", self.rate_interval)


def prometheus_get(base_url: str, path: str, params: Mapping[str, str | float]) -> object:
    url = f"{base_url}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        body = json.loads(resp.read())
    if body.get("status") != "success":
        raise RuntimeError(f"{url}: {body}")
    return body["data"]


def query_range(base_url: str, expr: str, start: float, end: float, step: float) -> list[Series]:
    data = prometheus_get(
        base_url, "/api/v1/query_range", {"query": expr, "start": start, "end": end, "step": step}
    )
    assert isinstance(data, dict)
    return [
        (dict(r["metric"]), [(float(t), float(v)) for t, v in r["values"]]) for r in data["result"]
    ]


def fetch(
    base_url: str, variables: Variables, start: float, end: float, step: float = 1.0
) -> dict[tuple[str, int], list[Series]]:
    """Every panel query's series over [start, end], keyed by (panel title, query index)."""
    out: dict[tuple[str, int], list[Series]] = {}
    for panel in dashboards.panels():
        for i, query in enumerate(panel.queries):
            out[(panel.title, i)] = query_range(
                base_url, variables.fill(query.expr), start, end, step
            )
    return out


def legend(template: str, labels: Mapping[str, str]) -> str:
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), template)


_UNIT_SUFFIX = {"ops": "/s", "Bps": "B/s", "s": "s", "short": ""}


def _format(value: float, unit: str) -> str:
    if unit == "s":
        if value == 0:
            return "0"
        if abs(value) < 1:
            return f"{value * 1000:.3g} ms"
        return f"{value:.3g} s"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g} {prefix}{_UNIT_SUFFIX.get(unit, '')}"
    return f"{value:.3g}{' ' + _UNIT_SUFFIX[unit] if _UNIT_SUFFIX.get(unit) else ''}"


def draw(
    data: Mapping[tuple[str, int], list[Series]],
    output: Path,
    *,
    start: float,
    end: float,
    subtitle: str = "",
    events: Sequence[tuple[float, str]] = (),
) -> Path:
    """Draw the dashboard's panels from ``data`` (as ``fetch`` returns it) into a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    rows = dashboards.ROWS
    grid_rows = sum(1 for _ in rows)
    fig = plt.figure(figsize=(20, 4.0 * grid_rows + 0.8), dpi=80, facecolor="#111217")
    outer = fig.add_gridspec(
        grid_rows, 24, hspace=0.55, wspace=2.2, top=0.93, bottom=0.04, left=0.03, right=0.99
    )
    fig.suptitle(
        f"{dashboards.TITLE}" + (f"  —  {subtitle}" if subtitle else ""),
        color="#d8d9da",
        fontsize=16,
        x=0.03,
        ha="left",
    )
    palette = [
        "#73bf69",
        "#f2cc0c",
        "#8ab8ff",
        "#ff780a",
        "#f2495c",
        "#5794f2",
        "#b877d9",
        "#705da0",
        "#37872d",
        "#fade2a",
    ]
    for r, (row_title, row_panels) in enumerate(rows):
        x = 0
        for panel in row_panels:
            ax = fig.add_subplot(outer[r, x : x + panel.width])
            x += panel.width
            ax.set_facecolor("#181b1f")
            for spine in ax.spines.values():
                spine.set_color("#2c3235")
            ax.tick_params(colors="#9fa7b3", labelsize=8)
            ax.grid(color="#2c3235", linewidth=0.6)
            title = panel.title if x > panel.width else f"{row_title}  /  {panel.title}"
            ax.set_title(title, color="#d8d9da", fontsize=10, loc="left")
            color = 0
            drawn = 0
            for i, query in enumerate(panel.queries):
                for labels, points in data.get((panel.title, i), []):
                    xs = [t - start for t, v in points if math.isfinite(v)]
                    ys = [v for _, v in points if math.isfinite(v)]
                    if not xs:
                        continue
                    ax.plot(
                        xs,
                        ys,
                        linewidth=1.4,
                        color=palette[color % len(palette)],
                        label=legend(query.legend, labels),
                    )
                    color += 1
                    drawn += 1
            for threshold, colour in panel.thresholds:
                ax.axhline(threshold, color=colour, linestyle="--", linewidth=0.8)
            for n, (t, _) in enumerate(events, 1):
                ax.axvline(t - start, color="#5a6270", linestyle=":", linewidth=0.8)
                ax.annotate(
                    str(n),
                    (t - start, 1.0),
                    xycoords=("data", "axes fraction"),
                    fontsize=7,
                    color="#9fa7b3",
                    va="bottom",
                    ha="center",
                )
            ax.set_xlim(0, end - start)
            if panel.min is not None and drawn:
                ax.set_ylim(bottom=panel.min)
            ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _, u=panel.unit: _format(v, u)))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.0f}s"))
            if drawn:
                ax.legend(
                    fontsize=7,
                    loc="upper left",
                    facecolor="#181b1f",
                    edgecolor="#2c3235",
                    labelcolor="#d8d9da",
                    ncol=2 if drawn > 4 else 1,
                )
            else:
                ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", color="#9fa7b3")
    if events:
        described = "    ".join(
            f"{n}: {label} ({t - start:.0f}s)" for n, (t, label) in enumerate(events, 1)
        )
        fig.text(0.03, 0.004, f"Events (dotted lines): {described}", color="#9fa7b3", fontsize=9)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, facecolor=fig.get_facecolor())
    plt.close(fig)
    return output
