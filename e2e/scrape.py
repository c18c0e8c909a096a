"""What the Prometheus Operator makes of a ServiceMonitor, for a Prometheus without it.

``scrape_config`` turns one of the chart's ServiceMonitors into a Prometheus scrape job with
Kubernetes service discovery against the API server (``role: endpoints``), keeping the targets
its selector, namespace selector and port pick, and labelling them as the operator does
(``namespace``, ``pod``, ``service``, ``job`` from ``jobLabel``) plus the monitor's own
relabelings. A Prometheus started with it scrapes exactly the pods the ServiceMonitor would
make a cluster's Prometheus scrape, which is how e2e/test_realpods.py checks the selector
matches real pods.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any


def _label(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def scrape_config(
    monitor: dict[str, Any], api_server: str, ca: Path, cert: Path, key: Path, interval: str
) -> dict[str, Any]:
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"]
    namespaces = spec.get("namespaceSelector", {})
    sd: dict[str, Any] = {
        "role": "endpoints",
        "api_server": api_server,
        "tls_config": {"ca_file": str(ca), "cert_file": str(cert), "key_file": str(key)},
    }
    if namespaces.get("matchNames"):
        sd["namespaces"] = {"names": list(namespaces["matchNames"])}
    relabel: list[dict[str, Any]] = []
    for name, value in sorted(spec["selector"].get("matchLabels", {}).items()):
        relabel.append(
            {
                "source_labels": [
                    f"__meta_kubernetes_service_label_{_label(name)}",
                    f"__meta_kubernetes_service_labelpresent_{_label(name)}",
                ],
                "regex": f"({re.escape(value)});true",
                "action": "keep",
            }
        )
    relabel += [
        {
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": endpoint["port"],
            "action": "keep",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
    ]
    if spec.get("jobLabel"):
        relabel.append(
            {
                "source_labels": [f"__meta_kubernetes_service_label_{_label(spec['jobLabel'])}"],
                "target_label": "job",
            }
        )
    for r in endpoint.get("relabelings", []):
        relabel.append({"source_labels": r["sourceLabels"], "target_label": r["targetLabel"]})
    meta = monitor["metadata"]
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/0",
        "scrape_interval": interval,
        "scrape_timeout": interval,
        "metrics_path": endpoint.get("path", "/metrics"),
        "kubernetes_sd_configs": [sd],
        "relabel_configs": relabel,
    }
