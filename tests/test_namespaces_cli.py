"""``hedwig namespaces`` against a secured development cluster (``hedwig dev up --secure``, two
hubs on ZooKeeper): a policy set, shown and listed with its usage against its limit, the topic
quota refusing a publish and ``topic create`` clearly, a raised limit applied without restarts,
publish rate quotas set with units and shown, bad input refused with the right exit status."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli import Cli, down, until_ready
from tests.waiting import poll

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(tmp_path: Path) -> Iterator[Cli]:
    """The super-user's commands on ``hedwig dev up --secure --hubs 2``."""
    cli = Cli(tmp_path / "dev.json")
    log_path = tmp_path / "up.log"
    with open(log_path, "w+b") as log:
        up = subprocess.Popen(
            [sys.executable, "-m", "hedwig", "dev", "up", "--hubs", "2", "--secure"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cli.env,
        )
        try:
            until_ready(up, log_path, "dev up --secure")
            (line,) = [x for x in log_path.read_text().splitlines() if x.startswith("SECURE")]
            directory = Path(line.split()[3].rstrip(":"))
            as_admin = Cli(tmp_path / "dev.json")
            for entry in (directory / "env").read_text().splitlines():
                name, _, value = entry.removeprefix("export ").partition("=")
                as_admin.env[name] = value
            yield as_admin
        finally:
            down(cli, up)


def test_namespaces_set_get_list_delete_and_the_quota(admin: Cli) -> None:
    made = admin("namespaces", "set", "acme/web", "--max-topics", "2", "--retention-ms", "60000")
    assert made.returncode == 0, made.stderr
    assert "topics             0/2" in made.stdout and "60000" in made.stdout
    for topic in ("acme/web/a", "acme/web/b"):
        done = admin("pub", topic, input="m\n")
        assert done.returncode == 0, done.stderr
    refused = admin("pub", "acme/web/c", input="m\n")
    assert refused.returncode == 1
    assert "quota max_topics of namespace 'acme/web' reached" in refused.stderr
    assert "hedwig namespaces set acme/web --max-topics N" in refused.stderr
    created = admin("topic", "create", "acme/web/d")
    assert created.returncode == 1 and "max_topics" in created.stderr
    shown = json.loads(admin("namespaces", "get", "acme/web", "--json").stdout)
    assert (shown["topics"], shown["max_topics"]) == (2, 2)
    assert shown["topic_defaults"]["retention-ms"] == 60000
    # A raised limit applies without restarting the hubs (they watch the policies).
    raised = admin("namespaces", "set", "acme/web", "--max-topics", "3", "--json")
    assert json.loads(raised.stdout)["max_topics"] == 3
    poll(lambda: admin("pub", "acme/web/c", input="m\n").returncode == 0, what="raised")
    listed = json.loads(admin("namespaces", "list", "--json").stdout)
    assert [(r["namespace"], r["topics"], r["max_topics"]) for r in listed] == [("acme/web", 3, 3)]
    assert (
        json.loads(admin("namespaces", "get", "acme/web", "--json").stdout)["topic_defaults"][
            "retention-ms"
        ]
        == 60000
    )  # kept: a setting left out keeps its value
    # A deleted topic frees its place.
    assert admin("topic", "delete", "acme/web/a", "--force").returncode == 0
    assert json.loads(admin("namespaces", "get", "acme/web", "--json").stdout)["topics"] == 2
    unset = admin("namespaces", "set", "acme/web", "--unset", "max-topics")
    assert unset.returncode == 0 and "topics             2 (no limit)" in unset.stdout
    # Publish rate quotas: set with units, shown, taken away; bad values refused.
    rated = admin(
        "namespaces", "set", "acme/web", "--max-publish-rate", "500", "--max-publish-bytes", "10MiB"
    )
    assert rated.returncode == 0, rated.stderr
    assert "max-publish-rate   500 msg/s" in rated.stdout
    assert "max-publish-bytes  10485760 B/s" in rated.stdout
    shown = json.loads(admin("namespaces", "get", "acme/web", "--json").stdout)
    assert (shown["max_publish_msgs_per_s"], shown["max_publish_bytes_per_s"]) == (500, 10 << 20)
    assert admin("pub", "acme/web/b", input="m\n").returncode == 0  # held at most, not refused
    assert (
        admin("namespaces", "set", "acme/web", "--max-publish-bytes", "10 parsecs").returncode == 2
    )
    assert admin("namespaces", "set", "acme/web", "--max-publish-rate", "-5").returncode == 2
    unrated = admin("namespaces", "set", "acme/web", "--unset", "max-publish-rate", "--json")
    assert json.loads(unrated.stdout)["max_publish_msgs_per_s"] is None
    # Bad input: the command used wrongly (2), a bad name or a missing policy (1).
    assert admin("namespaces", "set", "acme/web", "--max-topics", "-1").returncode == 2
    assert admin("namespaces", "set", "acme/web", "--max-topics", "ten").returncode == 2
    bad = admin("namespaces", "set", "acme", "--max-topics", "1")
    assert bad.returncode == 1 and "namespace name" in bad.stderr
    assert admin("namespaces", "delete", "acme/web").returncode == 0
    again = admin("namespaces", "delete", "acme/web")
    assert again.returncode == 1 and "has no policy" in again.stderr
    assert "(no namespace policies" in admin("namespaces", "list").stdout
