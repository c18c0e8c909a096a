"""The images as `make images` builds them (images/build.sh: buildah, no Docker engine), read
from their docker-archive tars: what a user expects of them. Each runs as a numeric non-root
user, carries the OCI labels, and holds nothing of the build's secrets or helpers: the host's
CA bundle, the pip.conf and the wheel folder are mounted only while it builds. Skipped when the
images are not built (``make test`` builds them first), except under CI."""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from tests.chart.tools import ROOT

IMAGES = {"hub": "hedwig-hub", "operator": "hedwig-operator", "spark": "hedwig-spark"}
BUILD_ONLY = ("root/.config", "root/wheels", "etc/pip.conf", "wheels/", "etc/ssl/certs/host-ca")
SECRET_NAMES = (
    "id_rsa",
    "id_ed25519",
    ".netrc",
    ".pypirc",
    ".git-credentials",
    ".docker/config.json",
)


def _built() -> dict[str, Path]:
    cache = Path(os.environ.get("HEDWIG_CACHE") or Path.home() / ".cache" / "hedwig") / "images"
    key = subprocess.run(
        ["bash", str(ROOT / "images" / "build.sh"), "--keys"],
        capture_output=True,
        text=True,
        check=False,
    )
    found = {}
    for line in key.stdout.splitlines():
        image, _, tar = line.partition(" ")
        if image in IMAGES and Path(tar).is_file():
            found[image] = Path(tar)
    missing = set(IMAGES) - set(found)
    if missing:
        message = f"images not built ({', '.join(sorted(missing))}): make images ({cache})"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return found


def _read(tar: tarfile.TarFile, name: str) -> Any:
    member = tar.extractfile(name)
    assert member is not None, name
    return json.load(member)


@pytest.mark.parametrize("image", sorted(IMAGES))
def test_built_image_is_non_root_labelled_and_carries_no_build_secrets(image: str) -> None:
    path = _built()[image]
    with tarfile.open(path) as archive:
        (manifest,) = _read(archive, "manifest.json")
        assert manifest["RepoTags"][0].split("/")[-1].startswith(f"{IMAGES[image]}:")
        config = _read(archive, manifest["Config"])["config"]
        user = config["User"].split(":")[0]
        assert user.isdigit() and int(user) > 0, f"{image} runs as {config['User']!r}"
        labels = config.get("Labels") or {}
        for key in ("title", "description", "version", "licenses"):
            assert labels.get(f"org.opencontainers.image.{key}"), f"{image} lacks {key}"
        assert labels["org.opencontainers.image.title"] == IMAGES[image]
        assert not any("CERT" in e or "TOKEN" in e for e in config.get("Env", [])), config["Env"]
        for layer in manifest["Layers"]:
            member = archive.extractfile(layer)
            assert member is not None
            with tarfile.open(fileobj=member, mode="r|*") as files:
                for entry in files:
                    name = entry.name.removeprefix("./")
                    assert not name.startswith(BUILD_ONLY), f"{image} keeps {name}"
                    assert not name.endswith(SECRET_NAMES), f"{image} holds {name}"
