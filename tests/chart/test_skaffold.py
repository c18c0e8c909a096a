"""skaffold.yaml, without skaffold (its Go module cannot be installed here): its schema version,
that it builds both images with its custom builder, images/skaffold-build.sh, which runs the
same build as `make images` and which this test runs as skaffold would (IMAGE, PUSH_IMAGE); and
that the values it sets exist in the chart and put the built images into the Deployment and
the HubPool (skaffold's templates rendered by hand, as skaffold would)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.chart.tools import CHART, ROOT, one, render

SKAFFOLD = ROOT / "skaffold.yaml"
BUILDER = ROOT / "images" / "skaffold-build.sh"


def _config() -> dict[str, Any]:
    return yaml.safe_load(SKAFFOLD.read_text())  # type: ignore[no-any-return]


def _template_var(name: str) -> str:
    """skaffold's variable suffix for an image: "/" and "-" become "_"."""
    return re.sub(r"[/\-.]", "_", name)


def test_skaffold_builds_both_images_with_the_image_build() -> None:
    config = _config()
    assert config["apiVersion"] == "skaffold/v4beta13"
    assert config["kind"] == "Config"
    artifacts = {a["image"]: a for a in config["build"]["artifacts"]}
    assert set(artifacts) == {"hedwig-hub", "hedwig-operator"}
    for artifact in artifacts.values():
        assert artifact["context"] == "."
        custom = artifact["custom"]
        assert (ROOT / custom["buildCommand"]).resolve() == BUILDER
        # skaffold rebuilds when a file the Dockerfile copies changes.
        dockerfile = ROOT / custom["dependencies"]["dockerfile"]["path"]
        assert dockerfile.is_file()
        assert dockerfile.with_name("Dockerfile.dockerignore").is_file()
    assert config["build"]["local"]["push"] is False


def test_skaffold_custom_builder_builds_the_image_skaffold_names(tmp_path: Path) -> None:
    """What skaffold runs for an artifact: IMAGE and PUSH_IMAGE in, an image of that name
    out (cached by `make images`, so this takes seconds once the images are built)."""
    if os.geteuid() != 0 or not shutil.which("buildah"):
        message = "the image build needs root and buildah (make images installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    image = "registry.local/team/hedwig-hub:abc1234"
    env = {
        **os.environ,
        "IMAGE": image,
        "PUSH_IMAGE": "false",
        "HEDWIG_SKAFFOLD_OUT": str(tmp_path),
    }
    proc = subprocess.run(
        [BUILDER], env=env, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == f"{image} {tmp_path}/hedwig-hub.tar"
    with tarfile.open(tmp_path / "hedwig-hub.tar") as archive:
        manifest = archive.extractfile("manifest.json")
        assert manifest is not None
        assert json.load(manifest)[0]["RepoTags"] == [image]


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
