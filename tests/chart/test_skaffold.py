"""skaffold.yaml, without skaffold (it cannot be built here, nor build images without a
Docker engine): its schema version, that it builds both images from their Dockerfiles, and
that the values it sets exist in the chart and put the built images into the Deployment and
the HubPool (skaffold's templates rendered by hand, as skaffold would)."""

from __future__ import annotations

import re
from typing import Any

import yaml

from tests.chart.tools import CHART, ROOT, one, render

SKAFFOLD = ROOT / "skaffold.yaml"


def _config() -> dict[str, Any]:
    return yaml.safe_load(SKAFFOLD.read_text())  # type: ignore[no-any-return]


def _template_var(name: str) -> str:
    """skaffold's variable suffix for an image: "/" and "-" become "_"."""
    return re.sub(r"[/\-.]", "_", name)


def test_skaffold_builds_both_images_from_their_dockerfiles() -> None:
    config = _config()
    assert config["apiVersion"] == "skaffold/v4beta13"
    assert config["kind"] == "Config"
    artifacts = {a["image"]: a for a in config["build"]["artifacts"]}
    assert set(artifacts) == {"hedwig-hub", "hedwig-operator"}
    for artifact in artifacts.values():
        assert artifact["context"] == "."
        dockerfile = ROOT / artifact["docker"]["dockerfile"]
        assert dockerfile.is_file()
        # BuildKit's per-Dockerfile ignore file keeps the context small.
        assert dockerfile.with_name("Dockerfile.dockerignore").is_file()
    assert config["build"]["local"]["useBuildkit"] is True


def _release() -> dict[str, Any]:
    (release,) = _config()["deploy"]["helm"]["releases"]
    return release  # type: ignore[no-any-return]


def test_skaffold_deploys_the_chart_with_the_built_images() -> None:
    release = _release()
    assert (ROOT / release["chartPath"]).resolve() == CHART
    templates = release["setValueTemplates"]
    built = {
        "IMAGE_REPO_hedwig_hub": "registry.local/hedwig-hub",
        "IMAGE_TAG_hedwig_hub": "abc1234",
        "IMAGE_REPO_hedwig_operator": "registry.local/hedwig-operator",
        "IMAGE_TAG_hedwig_operator": "abc1234-dirty",
    }
    for artifact in _config()["build"]["artifacts"]:
        var = _template_var(artifact["image"])
        assert f"{{{{.IMAGE_REPO_{var}}}}}" in templates.values()
        assert f"{{{{.IMAGE_TAG_{var}}}}}" in templates.values()

    def fill(value: Any) -> str:
        return re.sub(r"\{\{\.(\w+)\}\}", lambda m: built[m.group(1)], str(value))

    sets = [f"{key}={fill(value)}" for key, value in templates.items()]
    objects = render(sets=sets)
    container = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "registry.local/hedwig-operator:abc1234-dirty"
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert one(objects, "HubPool")["spec"]["image"] == "registry.local/hedwig-hub:abc1234"


def test_skaffold_monitoring_profile_sets_existing_values() -> None:
    (profile,) = _config()["profiles"]
    (patch,) = profile["patches"]
    assert patch["path"] == "/deploy/helm/releases/0/setValues"
    values = patch["value"].items()
    objects = render(
        sets=[f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in values]
    )
    kinds = {o["kind"] for o in objects}
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= kinds
