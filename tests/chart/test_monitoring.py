"""Alerts and the dashboard, statically: ``promtool check rules`` on the chart's
PrometheusRule, ``promtool test rules`` firing each alert on synthetic series (and staying
quiet where it should), every dashboard query parsed by promtool, the generated dashboard up
to date and shipped as a sidecar ConfigMap. e2e/test_monitoring.py evaluates the same alerts
and queries against real hubs."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.cog.runtime import panelcfg_config
from grafana_foundation_sdk.models import common, units
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.dashboard import Dashboard

import dashboards
from tests.chart.tools import CHART, one, render, run, tool_path

LABELS = {"namespace": "ns", "pool": "p"}


def rules_file(tmp_path: Path, sets: list[str] | None = None) -> Path:
    """The chart's PrometheusRule as a plain Prometheus rules file."""
    rule = one(
        render(sets=["metrics.prometheusRule.enabled=true", *(sets or [])]), "PrometheusRule"
    )
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    return path


def test_promtool_check_rules_passes(tmp_path: Path) -> None:
    out = run([tool_path("promtool"), "check", "rules", rules_file(tmp_path)]).stdout
    assert "SUCCESS: 8 rules found" in out


def test_the_alerts_the_issue_asks_for(tmp_path: Path) -> None:
    groups = yaml.safe_load(rules_file(tmp_path).read_text())["groups"]
    names = [r["alert"] for g in groups for r in g["rules"]]
    assert names == [
        "HedwigHubDown",
        "HedwigTopicWithoutOwner",
        "HedwigHubImbalance",
        "HedwigLedgersUnderReplicated",
        "HedwigZooKeeperSessionLost",
        "HedwigZooKeeperDisconnected",
        "HedwigPoolPinnedAtMaximum",
        "HedwigPoolScalingStalled",
    ]
    for g in groups:
        for r in g["rules"]:
            assert r["labels"]["severity"] in ("critical", "warning")
            assert r["annotations"]["summary"] and r["annotations"]["description"]


def test_rules_can_be_switched_off_and_tuned(tmp_path: Path) -> None:
    path = rules_file(
        tmp_path,
        [
            "metrics.prometheusRule.rules.hubDown.enabled=false",
            "metrics.prometheusRule.rules.imbalance.for=30m",
            "metrics.prometheusRule.rules.imbalance.minPoolRate=500",
        ],
    )
    rules = {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    assert "HedwigHubDown" not in rules
    assert rules["HedwigHubImbalance"]["for"] == "30m"
    assert "> 500" in rules["HedwigHubImbalance"]["expr"]


def _annotations(rule: dict[str, Any], labels: dict[str, str], value: str) -> dict[str, str]:
    """The rule's annotations as Prometheus renders them (the templates these rules use)."""
    out = {}
    for key, text in rule["annotations"].items():
        text = re.sub(r"{{ \$labels\.(\w+) }}", lambda m: labels[m.group(1)], text)
        text = text.replace('{{ $value | printf "%.2f" }}', f"{float(value):.2f}")
        out[key] = text.replace("{{ $value }}", value)
    return out


def _series(metric: str, values: str, **labels: str) -> dict[str, str]:
    all_labels = {**LABELS, **labels}
    inner = ", ".join(f'{k}="{v}"' for k, v in all_labels.items())
    return {"series": f"{metric}{{{inner}}}", "values": values}


# (alert, input series, eval time, [(labels, value)] expected to fire)
CASES: list[tuple[str, list[dict[str, str]], str, list[tuple[dict[str, str], str]]]] = [
    (
        "HedwigHubDown",
        [
            _series("up", "1 1 0 0 0 0", job="hedwig-hub", pod="p-0"),
            _series("up", "1 1 1 1 1 1", job="hedwig-hub", pod="p-1"),
        ],
        "5m",
        [({"job": "hedwig-hub", **LABELS, "pod": "p-0"}, "0")],
    ),
    (
        "HedwigTopicWithoutOwner",
        [
            # "lost": its owner p-0 vanished, nobody took it.
            _series(
                "hedwig_topic_rate",
                "5 5 5 stale",
                topic="lost",
                pod="p-0",
                direction="in",
                unit="messages",
            ),
            # "moved": from p-0 to p-1; "idle": owned, no traffic ever (not alerted either way).
            _series(
                "hedwig_topic_rate",
                "5 5 5 stale",
                topic="moved",
                pod="p-0",
                direction="in",
                unit="messages",
            ),
            _series(
                "hedwig_topic_rate",
                "_ _ 5 5 5 5 5 5",
                topic="moved",
                pod="p-1",
                direction="in",
                unit="messages",
            ),
            _series(
                "hedwig_topic_rate",
                "0 0 0 stale",
                topic="idle",
                pod="p-1",
                direction="in",
                unit="messages",
            ),
            # p-2 owns more topics than it lists: "cooled" slowed off its list (not alerted),
            # "dropped" was far hotter than anything listed and is gone (alerted).
            _series(
                "hedwig_topic_rate",
                "12 12 12 stale",
                topic="cooled",
                pod="p-2",
                direction="in",
                unit="messages",
            ),
            _series(
                "hedwig_topic_rate",
                "50 50 50 stale",
                topic="dropped",
                pod="p-2",
                direction="in",
                unit="messages",
            ),
            _series(
                "hedwig_topic_rate",
                "15x8",
                topic="listed",
                pod="p-2",
                direction="in",
                unit="messages",
            ),
            _series("hedwig_topic_rate_floor", "0 0 0 stale", pod="p-0"),
            _series("hedwig_topic_rate_floor", "0x8", pod="p-1"),
            _series("hedwig_topic_rate_floor", "10x8", pod="p-2"),
        ],
        "6m",
        [({**LABELS, "topic": "dropped"}, "1"), ({**LABELS, "topic": "lost"}, "1")],
    ),
    (
        "HedwigHubImbalance",
        [
            _series("hedwig_hub_rate", "100x30", pod="p-0", direction="in", unit="messages"),
            _series("hedwig_hub_rate", "100x30", pod="p-0", direction="out", unit="messages"),
            _series("hedwig_hub_rate", "0x30", pod="p-1", direction="in", unit="messages"),
            _series("hedwig_hub_rate", "0x30", pod="p-2", direction="in", unit="messages"),
            _series("hedwig_hub_rate", "1e6x30", pod="p-2", direction="in", unit="bytes"),
            # A balanced pool, and a skewed one too idle to matter.
            _series(
                "hedwig_hub_rate", "50x30", pool="q", pod="q-0", direction="in", unit="messages"
            ),
            _series(
                "hedwig_hub_rate", "50x30", pool="q", pod="q-1", direction="in", unit="messages"
            ),
            _series(
                "hedwig_hub_rate", "3x30", pool="r", pod="r-0", direction="in", unit="messages"
            ),
            _series(
                "hedwig_hub_rate", "0x30", pool="r", pod="r-1", direction="in", unit="messages"
            ),
        ],
        "20m",
        [(LABELS, "3")],
    ),
    (
        "HedwigLedgersUnderReplicated",
        [
            _series("hedwig_ledgers_under_replicated", "0 0 2x20", pod="p-0"),
            _series("hedwig_ledgers_under_replicated", "0x22", pod="p-1"),
        ],
        "15m",
        [(LABELS, "2")],
    ),
    (
        "HedwigZooKeeperSessionLost",
        [
            # p-0 loses its session at 3 min; p-1 at 21 min; p-2's only loss is older than
            # the data. Hubs create the counters at 0 when they start.
            _series("hedwig_zk_session_losses_total", "0 0 0 1 1 1", pod="p-0"),
            _series("hedwig_zk_session_losses_total", "0x20 1 1", pod="p-1"),
            _series("hedwig_zk_session_losses_total", "1x22", pod="p-2"),
            # p-3 lost a topic to a forced move, not to ZooKeeper: no alert.
            _series(
                "hedwig_topic_losses_total", "0 0 0 1 1 1", pod="p-3", reason="ownership-removed"
            ),
        ],
        "19m",
        [],  # p-0's loss (at 3m) is older than 10 minutes; p-1's second comes at 21m
    ),
    (
        "HedwigZooKeeperDisconnected",
        [
            _series("hedwig_zk_session_state", "1 1 0 0 0 0", pod="p-0", state="connected"),
            _series("hedwig_zk_session_state", "0 0 1 1 1 1", pod="p-0", state="suspended"),
            _series("hedwig_zk_session_state", "1 1 1 1 1 1", pod="p-1", state="connected"),
        ],
        "5m",
        [({**LABELS, "pod": "p-0"}, "0")],
    ),
    (
        # The operator's series (honorLabels: the pool's namespace and pool). p is pinned
        # from 2m on; q only for 5 minutes, less than the rule's 15m.
        "HedwigPoolPinnedAtMaximum",
        [
            _series("hedwig_pool_autoscaling_pinned", "0 0 1x20"),
            _series("hedwig_pool_autoscaling_pinned", "0 0 1x5 0x15", pool="q"),
        ],
        "20m",
        [(LABELS, "1")],
    ),
    (
        "HedwigPoolScalingStalled",
        [
            _series("hedwig_pool_autoscaling_stalled", "0 0 1x10"),
            _series("hedwig_pool_autoscaling_stalled", "0 0 1 1 0x8", pool="q"),
        ],
        "10m",
        [(LABELS, "1")],
    ),
]


def _unit_test(
    rules: dict[str, dict[str, Any]],
    alert: str,
    series: list[dict[str, str]],
    at: str,
    firing: list[tuple[dict[str, str], str]],
) -> dict[str, Any]:
    rule = rules[alert]
    return {
        "interval": "1m",
        "input_series": series,
        "alert_rule_test": [
            {
                "eval_time": at,
                "alertname": alert,
                "exp_alerts": [
                    {
                        "exp_labels": {**labels, **rule["labels"]},
                        "exp_annotations": _annotations(rule, labels, value),
                    }
                    for labels, value in firing
                ],
            }
        ],
    }


def test_promtool_unit_tests_fire_each_alert_only_when_it_should(tmp_path: Path) -> None:
    path = rules_file(tmp_path)
    rules = {r["alert"]: r for g in yaml.safe_load(path.read_text())["groups"] for r in g["rules"]}
    tests = [_unit_test(rules, *case) for case in CASES]
    # Session losses: p-0's at 3m is seen at 5m, p-1's at 21m is seen at 22m.
    series = CASES[4][1]
    tests.append(
        _unit_test(
            rules, "HedwigZooKeeperSessionLost", series, "5m", [({**LABELS, "pod": "p-0"}, "1")]
        )
    )
    tests.append(
        _unit_test(
            rules,
            "HedwigZooKeeperSessionLost",
            series[1:],
            "22m",
            [({**LABELS, "pod": "p-1"}, "1")],
        )
    )
    # Every alert is quiet before its condition has lasted its "for".
    tests.append(_unit_test(rules, "HedwigHubImbalance", CASES[2][1], "10m", []))
    tests.append(_unit_test(rules, "HedwigPoolPinnedAtMaximum", CASES[6][1], "12m", []))
    tests.append(_unit_test(rules, "HedwigHubDown", CASES[0][1], "3m", []))
    spec = tmp_path / "alerts_test.yaml"
    spec.write_text(
        yaml.safe_dump({"rule_files": [path.name], "evaluation_interval": "1m", "tests": tests})
    )
    proc = run([tool_path("promtool"), "test", "rules", spec], check=False, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ dashboard


def test_generated_dashboard_is_up_to_date() -> None:
    assert dashboards.main(["--check"]) == 0


def test_dashboard_panels_cover_what_the_issue_lists() -> None:
    titles = [p.title for p in dashboards.panels()]
    for wanted in (
        "Messages in per hub",
        "Messages out per hub",
        "Bytes in per hub",
        "Bytes out per hub",
        "Topics per hub",
        "Imbalance",
        "Topic moves by reason",
        "Time without owner",
        "Publish latency",
        "Subscriber backlog (top 10)",
        "Ledger replication",
        "ZooKeeper session state",
        "Hubs: desired, needed and bounds",
        "Pool utilisation",
        "Scale decisions by action",
    ):
        assert wanted in titles
    model = json.loads(dashboards.OUTPUT.read_text())
    assert model["uid"] == "hedwig-load"
    ids = [p["id"] for p in model["panels"]]
    assert len(ids) == len(set(ids))
    for panel in model["panels"]:
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    variables = [v["name"] for v in model["templating"]["list"]]
    assert variables == ["datasource", "namespace", "pool"]


def test_dashboard_round_trips_through_the_sdk_models_losing_nothing() -> None:
    """The shipped JSON read into grafana-foundation-sdk's models and written back is the same
    JSON: no field it does not know (a misspelled key would vanish), none lost."""
    shipped = json.loads(dashboards.OUTPUT.read_text())
    again = json.loads(json.dumps(Dashboard.from_json(shipped), cls=JSONEncoder))
    assert again == shipped


def _values(enum: Any) -> set[str]:
    return {str(e.value) for e in enum}


def test_dashboard_panel_types_and_enum_values_are_ones_the_sdk_knows() -> None:
    """The round trip keeps unknown enum values and panel types as they are, so check them
    against the SDK's registry of panel plugins and its enums."""
    register_default_plugins()
    shipped = json.loads(dashboards.OUTPUT.read_text())
    known_units = {v for v in vars(units).values() if isinstance(v, str)}
    for panel in shipped["panels"]:
        assert panel["type"] == "row" or panelcfg_config(panel["type"]) is not None, panel["type"]
        if panel["type"] == "row":
            continue
        defaults = panel["fieldConfig"]["defaults"]
        custom = defaults["custom"]
        assert defaults["unit"] in known_units, defaults["unit"]
        assert defaults["color"]["mode"] in _values(model.FieldColorModeId)
        assert custom["drawStyle"] in _values(common.GraphDrawStyle)
        assert custom["showPoints"] in _values(common.VisibilityMode)
        assert custom["stacking"]["mode"] in _values(common.StackingMode)
        if "thresholds" in defaults:
            assert defaults["thresholds"]["mode"] in _values(model.ThresholdsMode)
            assert custom["thresholdsStyle"]["mode"] in _values(common.GraphThresholdsStyleMode)
        legend, tooltip = panel["options"]["legend"], panel["options"]["tooltip"]
        assert legend["displayMode"] in _values(common.LegendDisplayMode)
        assert legend["placement"] in _values(common.LegendPlacement)
        assert tooltip["mode"] in _values(common.TooltipDisplayMode)
        assert tooltip["sort"] in _values(common.SortOrder)
    assert shipped["graphTooltip"] in {e.value for e in model.DashboardCursorSync}
    for variable in shipped["templating"]["list"]:
        assert variable["type"] in _values(model.VariableType)


def substitute(
    expr: str, namespace: str = ".*", pool: str = ".*", rate_interval: str = "1m"
) -> str:
    """A dashboard query as Grafana sends it, for one choice of the variables."""
    out = expr.replace("$namespace", namespace).replace("$pool", pool)
    out = out.replace("$__rate_interval", rate_interval)
    assert "$" not in out, out
    return out


def test_every_dashboard_query_is_valid_promql(tmp_path: Path) -> None:
    rules = [
        {"record": f"hedwig:dashboard_query_{i}", "expr": substitute(query.expr)}
        for i, (_, query) in enumerate(dashboards.queries())
    ]
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    out = run([tool_path("promtool"), "check", "rules", path]).stdout
    assert f"SUCCESS: {len(rules)} rules found" in out


@pytest.mark.parametrize("folder", ["Hedwig", ""])
def test_dashboard_configmap_for_the_grafana_sidecar(folder: str) -> None:
    objects = render(sets=["dashboards.enabled=true", f"dashboards.folder={folder}"])
    cm = one(objects, "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert (cm["metadata"].get("annotations") or {}).get("grafana_folder", "") == folder
    assert json.loads(cm["data"]["hedwig-load.json"]) == json.loads(dashboards.OUTPUT.read_text())
    assert (CHART / "dashboards" / "hedwig-load.json") == dashboards.OUTPUT


def test_monitors_scrape_the_hubs_with_job_and_pool_labels() -> None:
    for kind, key, toggle in (
        ("ServiceMonitor", "endpoints", "serviceMonitor"),
        ("PodMonitor", "podMetricsEndpoints", "podMonitor"),
    ):
        objects = render(
            sets=[f"metrics.{toggle}.enabled=true", f"metrics.{toggle}.labels.release=kps"]
        )
        monitor = one(objects, kind, "hedwig-hubs")
        spec = monitor["spec"]
        assert monitor["metadata"]["labels"]["release"] == "kps"
        assert (
            spec["jobLabel"] == "app.kubernetes.io/name"
        )  # job="hedwig-hub", as the alerts expect
        assert spec["selector"]["matchLabels"]["app.kubernetes.io/name"] == "hedwig-hub"
        assert spec["namespaceSelector"] == {"matchNames": ["hedwig"]}
        (endpoint,) = spec[key]
        assert endpoint["port"] == "metrics"
        assert endpoint["relabelings"] == [
            {"sourceLabels": ["__meta_kubernetes_pod_label_hedwig_io_pool"], "targetLabel": "pool"}
        ]
        zookeeper = one(objects, kind, "hedwig-zookeeper")["spec"][key]
        assert zookeeper[0]["port"] == "metrics"


def test_operator_pod_monitor_scrapes_its_metrics_with_the_pools_labels() -> None:
    assert not [
        o
        for o in render(sets=["metrics.podMonitor.enabled=true"])
        if o["kind"] == "PodMonitor" and o["metadata"]["name"] == "hedwig-operator"
    ]
    objects = render(sets=["metrics.operatorPodMonitor.enabled=true"])
    monitor = one(objects, "PodMonitor", "hedwig-operator")
    labels = monitor["spec"]["selector"]["matchLabels"]
    assert labels["app.kubernetes.io/component"] == "operator"
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["honorLabels"] is True
    deployment = one(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-port=9102" in container["args"]
    assert {"name": "metrics", "containerPort": 9102, "protocol": "TCP"} in container["ports"]
