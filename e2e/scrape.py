"""What the Prometheus Operator makes of a ServiceMonitor, for a Prometheus without it.

``targets`` resolves one of the chart's ServiceMonitors against the live objects of a cluster
as the operator's generated service discovery would (Debian's Prometheus is built without
Kubernetes service discovery, so the test writes the result as a static configuration): the
Services its selector and namespace selector pick, their EndpointSlices' endpoints on the
monitor's port, labelled ``namespace``, ``pod``, ``service``, ``job`` (from ``jobLabel``)
plus the monitor's relabelings of pod labels. A Prometheus scraping them scrapes exactly the
pods the ServiceMonitor would make a cluster's Prometheus scrape, which is how
e2e/test_realpods.py checks the selector matches real pods.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

#: ``kubectl get ... -o json`` of a kind in a namespace (decoded), e.g. ``("services", ns)``.
Lister = Callable[[str, str], list[dict[str, Any]]]

POD_LABEL = re.compile(r"^__meta_kubernetes_pod_label_(\w+)$")


def _sanitize(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def targets(
    monitor: dict[str, Any], namespaces: list[str], get: Lister
) -> list[tuple[str, dict[str, str]]]:
    """``[(host:port, labels), ...]`` the ServiceMonitor selects."""
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"]
    names = spec.get("namespaceSelector", {}).get("matchNames") or namespaces
    wanted = spec["selector"].get("matchLabels", {})
    out = []
    for ns in names:
        pods = {p["metadata"]["name"]: p for p in get("pods", ns)}
        for service in get("services", ns):
            labels = service["metadata"].get("labels", {})
            if any(labels.get(k) != v for k, v in wanted.items()):
                continue
            name = service["metadata"]["name"]
            for piece in get("endpointslices", ns):
                if piece["metadata"].get("labels", {}).get("kubernetes.io/service-name") != name:
                    continue
                ports = [p for p in piece.get("ports") or [] if p.get("name") == endpoint["port"]]
                for port in ports:
                    for ep in piece.get("endpoints") or []:
                        pod = (ep.get("targetRef") or {}).get("name", "")
                        target = {
                            "namespace": ns,
                            "service": name,
                            "pod": pod,
                            "job": labels.get(spec.get("jobLabel", ""), name),
                        }
                        pod_labels = pods.get(pod, {}).get("metadata", {}).get("labels", {})
                        for rule in endpoint.get("relabelings", []):
                            (source,) = rule["sourceLabels"]
                            match = POD_LABEL.match(source)
                            if match:
                                value = next(
                                    (v for k, v in pod_labels.items() if _sanitize(k) == match[1]),
                                    "",
                                )
                                target[rule["targetLabel"]] = value
                        for address in ep["addresses"]:
                            out.append((f"{address}:{port['port']}", target))
    return sorted(out)
