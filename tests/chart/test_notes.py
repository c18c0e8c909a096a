"""The NOTES' commands, statically: valid shell as pasted, and on a secured pool (the
default) the client pods they run carry what docs/security.md's pod spec gives a client
(the ServiceAccount, its projected token for the hubs' audience, the pool's CA named by
HEDWIG_TLS_CA). e2e/test_realpods.py runs them on real pods."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from typing import Any

import yaml

from hedwig.security.credentials import POD_TOKEN_FILE
from tests.chart.notes import render_notes, step
from tests.chart.tools import ROOT


def _overrides(commands: str) -> dict[str, dict[str, Any]]:
    """Each ``kubectl run`` of the commands: its pod's name and its --overrides."""
    joined = commands.replace("\\\n", " ")
    found = {}
    for line in joined.splitlines():
        if " run hedwig-" not in line:
            continue
        words = shlex.split(line)
        name = words[words.index("run") + 1]
        given = [w.split("=", 1)[1] for w in words if w.startswith("--overrides=")]
        found[name] = json.loads(given[0]) if given else {}
        assert ("--override-type=strategic" in words) == bool(given)
    return found


def _docs_pod_spec() -> dict[str, Any]:
    text = (ROOT / "docs" / "security.md").read_text()
    match = re.search(r"```yaml\n# in the client's pod spec\n(.*?)```", text, re.S)
    assert match is not None
    spec: dict[str, Any] = yaml.safe_load(match.group(1))
    return spec


def test_every_step_is_valid_as_pasted() -> None:
    for sets in ([], ["hubPool.security.enabled=false"]):
        notes = render_notes(sets)
        for number in (1, 2, 3):
            checked = subprocess.run(["bash", "-n"], input=step(notes, number), text=True)
            assert checked.returncode == 0, (sets, number)
        # The Python one runs as a script: no top-level ``async with``.
        compile(step(notes, 4), "notes-step-4.py", "exec")


def test_secured_pool_clients_get_the_token_and_the_ca() -> None:
    notes = render_notes(["hubPool.security.audience=hedwig"])
    commands = step(notes, 2)
    pods = _overrides(commands)
    assert set(pods) == {"hedwig-sub", "hedwig-pub"}
    docs = _docs_pod_spec()
    (docs_token,) = docs["volumes"]
    for name, override in pods.items():
        spec = override["spec"]
        assert spec["serviceAccountName"] == "greeter"
        volumes = {v["name"]: v for v in spec["volumes"]}
        (container,) = spec["containers"]
        assert container["name"] == name  # kubectl run names the container after the pod
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        # The token as docs/security.md projects it, where the client looks by default.
        token = volumes[mounts["/var/run/secrets/hedwig"]]
        assert token["projected"] == docs_token["projected"]
        assert POD_TOKEN_FILE == "/var/run/secrets/hedwig/token"
        env = {e["name"]: e["value"] for e in container["env"]}
        ca_dir = env["HEDWIG_TLS_CA"].rpartition("/")[0]
        assert volumes[mounts[ca_dir]]["configMap"] == {"name": "hedwig-ca-cert"}
    assert "--command -- hedwig sub --hub hedwig.hedwig.svc:4080 greetings reader" in commands
    assert "| kubectl -n hedwig run hedwig-pub" in commands


def test_an_open_pool_runs_plain_pods() -> None:
    commands = step(render_notes(["hubPool.security.enabled=false"]), 2)
    assert _overrides(commands) == {"hedwig-sub": {}, "hedwig-pub": {}}


def test_deploying_md_gives_the_notes_commands_for_its_release() -> None:
    """docs/deploying.md's publish and subscribe commands are the NOTES' for its release (the
    image it builds), so what the page says to paste is what the chart prints."""
    text = (ROOT / "docs" / "deploying.md").read_text()
    after = text[text.index("For the release\nabove (the NOTES") :]
    match = re.search(r"```\n(.*?)```", after, re.S)
    assert match is not None
    notes = render_notes(["hub.image.repository=registry.example/hedwig-hub"])
    assert match.group(1) == step(notes, 2).replace("\n\n\n", "\n\n")
