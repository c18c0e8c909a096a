"""Where the hubs' load comes from.

By default, the hubs' own reports in ZooKeeper (``hosts/<h>/alive``: EWMA message and byte
rates per topic, rewritten every few seconds). With ``spec.rebalancing.prometheus`` the
per-topic rates come from Prometheus instead (``rate()`` of the hubs' ``hedwig_*_total``
counters over a window), for users who want one source of truth for dashboards and
balancing. Which hubs exist, are alive and own which topics always comes from ZooKeeper:
Prometheus keeps series of topics a hub has already given away.

The Prometheus series name their hub by a label (``pod`` by default); a label value matches a
hub whose address is that value, or whose host is, or whose first DNS label is (a pod name).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import aiohttp

from hedwig.metadata import HubLoad, HubStatus, TopicLoad
from hedwig_operator.specs import PoolSpec, PrometheusSpec

METRICS = {
    "msg_in": "hedwig_messages_in_total",
    "bytes_in": "hedwig_bytes_in_total",
    "msg_out": "hedwig_messages_out_total",
    "bytes_out": "hedwig_bytes_out_total",
}

# (hub label value, topic) -> rate
Samples = Mapping[tuple[str, str], float]


class PrometheusError(Exception):
    """Prometheus could not be queried or answered something unusable."""


def default_selector(pool: PoolSpec) -> str:
    return f'namespace="{pool.namespace}",pod=~"{pool.name}-[0-9]+"'


def prometheus_queries(spec: PrometheusSpec, pool: PoolSpec) -> dict[str, str]:
    """One PromQL query per TopicLoad field, summing per hub and topic."""
    selector = spec.selector if spec.selector is not None else default_selector(pool)
    return {
        field: f"sum by ({spec.hub_label}, topic) (rate({metric}{{{selector}}}[{spec.window}]))"
        for field, metric in METRICS.items()
    }


def parse_vector(answer: Mapping[str, Any], hub_label: str) -> dict[tuple[str, str], float]:
    """An instant-vector answer of ``/api/v1/query`` to {(hub, topic): value}."""
    if answer.get("status") != "success":
        raise PrometheusError(f"query failed: {answer.get('error', answer)}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise PrometheusError(f"expected a vector, got {data.get('resultType')!r}")
    out: dict[tuple[str, str], float] = {}
    for item in data.get("result") or ():
        labels = item.get("metric") or {}
        hub, topic = labels.get(hub_label), labels.get("topic")
        if hub is None or topic is None:
            continue
        try:
            value = float(item["value"][1])
        except (KeyError, IndexError, TypeError, ValueError):
            continue
        if value == value:  # NaN from an empty window is not a rate
            out[(str(hub), str(topic))] = value
    return out


def label_matches(address: str, value: str) -> bool:
    host = address.rsplit(":", 1)[0]
    return value in (address, host, host.split(".", 1)[0])


def _total(field: str, reported: HubLoad, measured: Mapping[str, TopicLoad]) -> float:
    """A hub total with its listed topics' rates replaced: the report lists the hub's hottest
    topics only, and the traffic of the rest (its totals less the listed ones) stays."""
    listed = sum(float(getattr(t, field)) for t in reported.topic_loads.values())
    rest = max(0.0, float(getattr(reported, field)) - listed)
    return rest + sum(float(getattr(t, field)) for t in measured.values())


def merge_prometheus(
    hubs: Sequence[HubStatus], samples: Mapping[str, Samples], now_ms: int
) -> list[HubStatus]:
    """Hubs with per-topic rates replaced by Prometheus' (``samples`` per TopicLoad field).

    Only topics the hub's report lists (its hottest) are replaced; subscribers and backlog
    stay from the report, and so does the traffic of the topics it does not list. A hub
    without a report gets none (the policy ignores hubs it knows nothing of).
    """
    out: list[HubStatus] = []
    for hub in hubs:
        if hub.load is None:
            out.append(hub)
            continue
        topic_loads: dict[str, TopicLoad] = {}
        for topic, reported in hub.load.topic_loads.items():
            rates: dict[str, float] = dict.fromkeys(METRICS, 0.0)
            for field, by_key in samples.items():
                rates[field] = sum(
                    v
                    for (label, t), v in by_key.items()
                    if t == topic and label_matches(hub.address, label)
                )
            topic_loads[topic] = TopicLoad(
                msg_in=rates["msg_in"],
                bytes_in=rates["bytes_in"],
                msg_out=rates["msg_out"],
                bytes_out=rates["bytes_out"],
                subscribers=reported.subscribers,
                backlog=reported.backlog,
            )
        load = HubLoad(
            timestamp_ms=now_ms,
            topics=hub.load.topics,
            connections=hub.load.connections,
            cpu=hub.load.cpu,
            msg_in=_total("msg_in", hub.load, topic_loads),
            bytes_in=_total("bytes_in", hub.load, topic_loads),
            msg_out=_total("msg_out", hub.load, topic_loads),
            bytes_out=_total("bytes_out", hub.load, topic_loads),
            topic_loads=topic_loads,
        )
        out.append(replace(hub, load=load))
    return out


async def fetch_prometheus_load(
    spec: PrometheusSpec,
    pool: PoolSpec,
    hubs: Sequence[HubStatus],
    now_ms: int,
    *,
    timeout_s: float = 10.0,
) -> list[HubStatus]:
    samples: dict[str, Samples] = {}
    url = spec.url.rstrip("/") + "/api/v1/query"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as http:
            for field, query in prometheus_queries(spec, pool).items():
                async with http.get(url, params={"query": query}) as resp:
                    if resp.status != 200:
                        raise PrometheusError(f"{url} answered {resp.status}: {await resp.text()}")
                    samples[field] = parse_vector(await resp.json(), spec.hub_label)
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        raise PrometheusError(f"cannot query {url}: {exc!r}") from exc
    return merge_prometheus(hubs, samples, now_ms)
