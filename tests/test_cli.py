"""The ``hedwig`` command as a user drives it: a development cluster started and controlled with
``hedwig dev``, commands that find it with no addresses, pipes, JSON, a terminal for progress,
and the failures users hit first, each with a clear message and a non-zero exit."""

from __future__ import annotations

import json
import os
import pty
import re
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from hedwig.devcluster.cluster import DevCluster
from tests import scratch
from tests.waiting import poll

pytestmark = pytest.mark.integration


class Cli:
    """Runs ``hedwig`` with its own development-cluster state file."""

    def __init__(self, state: Path) -> None:
        self.env = {**os.environ, "HEDWIG_DEV_STATE": str(state)}
        for name in ("HEDWIG_HUB", "HEDWIG_ZK", "HEDWIG_REGION"):
            self.env.pop(name, None)

    def __call__(
        self, *args: str, input: bytes | str | None = None, timeout: float = 60, **env: str
    ) -> subprocess.CompletedProcess[str]:
        data = input.encode() if isinstance(input, str) else input
        out = subprocess.run(
            [sys.executable, "-m", "hedwig", *args],
            input=data,
            capture_output=True,
            timeout=timeout,
            env={**self.env, **env},
        )
        return subprocess.CompletedProcess(
            out.args, out.returncode, out.stdout.decode(errors="replace"), out.stderr.decode()
        )


@pytest.fixture(scope="module")
def dev() -> Iterator[Cli]:
    """``hedwig dev up`` with three hubs, as a user starts it, and its control commands."""
    state = Path(scratch.mkdtemp("cli-")) / "dev.json"
    cli = Cli(state)
    log = open(state.parent / "up.log", "w+b")  # noqa: SIM115
    up = subprocess.Popen(
        [sys.executable, "-m", "hedwig", "dev", "up", "--hubs", "3", "--zk-session-timeout", "3"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=cli.env,
    )
    try:
        until_ready(up, Path(log.name), "dev up")
        yield cli
    finally:
        down(cli, up)
        log.close()
        assert not state.exists(), "dev up left its state file behind"


def until_ready(up: subprocess.Popen[bytes], log: Path, what: str) -> None:
    """Wait for ``hedwig dev up`` to say READY in its log; fail if it exits first."""

    def said() -> bool:
        assert up.poll() is None, log.read_text()
        return b"READY" in log.read_bytes()

    poll(said, 90, what=f"{what} ready")


def down(cli: Cli, up: subprocess.Popen[bytes]) -> None:
    """``hedwig dev down``, and ``dev up`` gone (killed if it does not end within a minute)."""
    cli("dev", "down")
    try:
        up.wait(60)
    except subprocess.TimeoutExpired:
        up.kill()


def subscriptions(dev: Cli, topic: str) -> list[dict[str, Any]]:
    """``hedwig subscriptions TOPIC --json``."""
    rows: list[dict[str, Any]] = json.loads(dev("subscriptions", topic, "--json").stdout or "[]")
    return rows


def until_attached(dev: Cli, topic: str) -> list[dict[str, Any]]:
    """Wait until a subscriber is attached to a subscription of ``topic``; its rows."""
    subs: list[dict[str, Any]] = []

    def seen() -> bool:
        subs[:] = subscriptions(dev, topic)
        return any(s["attached"] for s in subs)

    poll(seen, what=f"a subscriber attached to {topic}")
    return subs


def test_the_readme_session_needs_no_addresses(dev: Cli) -> None:
    status = json.loads(dev("dev", "status", "--json").stdout)
    assert [h["running"] for h in status["hubs"]] == [True, True, True]
    assert status["region"] == "default"
    sub = subprocess.Popen(
        [sys.executable, "-m", "hedwig", "sub", "greetings", "reader", "--count", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dev.env,
    )
    until_attached(dev, "greetings")  # the subscription exists once the subscriber is attached
    pub = dev("pub", "greetings", input="hello\nworld\n")
    assert pub.returncode == 0, pub.stderr
    out, err = sub.communicate(timeout=30)
    assert sub.returncode == 0, err
    assert out.decode().splitlines()[-2:] == [
        pub.stdout.splitlines()[0],
        pub.stdout.splitlines()[1],
    ]
    topics = json.loads(dev("topics", "--json").stdout)
    assert any(t["topic"] == "greetings" for t in topics)


def test_a_hub_killed_and_restarted_by_hand(dev: Cli) -> None:
    assert dev("pub", "failover", "-q", input="one\n").returncode == 0
    killed = dev("dev", "kill", "0")
    assert killed.returncode == 0 and "down" in killed.stdout
    # The cluster goes on without it: the topic is served again within the session timeout.
    pub = dev("pub", "failover", input="two\n")
    assert pub.returncode == 0, pub.stderr
    assert pub.stdout == "2\ttwo\n"
    restarted = dev("dev", "restart", "0")
    assert restarted.returncode == 0 and "running" in restarted.stdout
    status = json.loads(dev("dev", "status", "--json").stdout)
    assert all(h["running"] for h in status["hubs"])


def test_pub_fast_with_a_summary(dev: Cli) -> None:
    lines = b"".join(b"%099d\n" % i for i in range(50_000))
    pub = dev("pub", "bulk", "--quiet", "--summary", input=lines)
    assert pub.returncode == 0, pub.stderr
    assert pub.stdout == ""
    assert "50000 messages acknowledged" in pub.stderr
    peek = dev("sub", "bulk", "--peek", "--from", "49999")
    assert peek.stdout.splitlines() == [f"49999\t{49998:099d}", f"50000\t{49999:099d}"]


def test_pub_stopping_at_a_line_prints_what_was_stored_before_it(dev: Cli) -> None:
    """An oversized line stops ``hedwig pub``; the lines before it were stored, and their
    acknowledgements are printed, so a script re-publishes only from the line it names."""
    lines = "".join(f"m{i}\n" for i in range(1, 1001)) + "y" * 2_000_000 + "\nafter\n"
    pub = dev("pub", "stops", input=lines)
    assert pub.returncode == 1
    assert pub.stdout.splitlines() == [f"{i}\tm{i}" for i in range(1, 1001)]
    assert "line 1001 (2,000,000 bytes) was not published" in pub.stderr
    assert "the 1000 lines before line 1001 were stored" in pub.stderr
    peek = dev("sub", "stops", "--peek")
    assert len(peek.stdout.splitlines()) == 1000  # none twice, none after the stop
    quiet = dev("pub", "stops", "-q", "-K", ":", input="k:v\nno separator\n")
    assert quiet.returncode == 2 and "line 2 has no key separator" in quiet.stderr
    assert "the 1 lines before line 2 were stored (not printed: --quiet)" in quiet.stderr


def test_keys_headers_and_json(dev: Cli) -> None:
    pub = dev("pub", "keyed", "-K", ":", "-H", "source=cli", input="k1:v1\nk2:v2\n")
    assert pub.returncode == 0, pub.stderr
    pub = dev(
        "pub",
        "keyed",
        "--input",
        "json",
        input='{"value": "v3", "key": "k3", "headers": {"trace": "t3"}}\n',
    )
    assert pub.returncode == 0, pub.stderr
    rows = [json.loads(x) for x in dev("sub", "keyed", "--peek", "--json").stdout.splitlines()]
    assert [(r["seq"], r["key"], r["value"]) for r in rows] == [
        (1, "k1", "v1"),
        (2, "k2", "v2"),
        (3, "k3", "v3"),
    ]
    assert rows[0]["headers"] == {"source": "cli"} and rows[2]["headers"] == {"trace": "t3"}
    assert all(r["timestamp"].endswith("+00:00") and r["publisher"] for r in rows)
    table = dev("sub", "keyed", "--peek", "--print", "key,headers").stdout.splitlines()
    assert table[0] == "1\tk1\tsource=cli\tv1"
    bad = dev("sub", "keyed", "--peek", "--print", "colour")
    assert bad.returncode == 2 and "colour" in bad.stderr


def test_pub_with_a_delivery_time(dev: Cli) -> None:
    pub = dev("pub", "later", "--deliver-after", "1h", input="v1\n")
    assert pub.returncode == 0, pub.stderr
    pub = dev("pub", "later", "--deliver-at", "2026-12-02T15:00:00+00:00", input="v2\n")
    assert pub.returncode == 0, pub.stderr
    rows = [json.loads(x) for x in dev("sub", "later", "--peek", "--json").stdout.splitlines()]
    assert [r["value"] for r in rows] == ["v1", "v2"]  # a reader sees them at once
    assert all("hedwig-deliver-at" in r["headers"] for r in rows)
    for args in (("--deliver-after=-5s",), ("--deliver-at", "2026-12-02T15:00:00")):
        bad = dev("pub", "later", *args, input="v\n")
        assert bad.returncode != 0 and "deliver" in bad.stderr, bad.stderr
    far = dev("pub", "later", "--deliver-after", "200h", input="v\n")
    assert far.returncode == 1 and "ahead is allowed" in far.stderr, far.stderr


def test_peeking_creates_nothing(dev: Cli) -> None:
    peek = dev("sub", "never-created", "--peek")
    assert peek.returncode == 1 and "does not exist" in peek.stderr
    assert "never-created" not in dev("topics").stdout


def test_topic_and_subscription_lifecycle(dev: Cli) -> None:
    assert dev("pub", "life", "-q", input="".join(f"m{i}\n" for i in range(10))).returncode == 0
    attached = subprocess.Popen(
        [sys.executable, "-m", "hedwig", "sub", "life", "watcher", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dev.env,
    )
    try:
        subs = until_attached(dev, "life")
        assert [(s["subscription"], s["attached"]) for s in subs] == [("watcher", True)]
        described = json.loads(dev("topic", "describe", "life", "--json").stdout)
        assert described["first_seq"] == 1 and described["last_seq"] == 10
        assert described["subscriptions"] == described["attached"] == 1
        assert described["owner"] in dev("dev", "status").stdout
        reset = dev("subscription", "reset", "life", "watcher", "--to", "4")
        assert reset.returncode == 0 and "restarts at 4" in reset.stdout
        refused = dev("topic", "delete", "life")
        assert refused.returncode == 1 and "--force" in refused.stderr
        forced = dev("topic", "delete", "life", "--force")
        assert forced.returncode == 0, forced.stderr
        out, err = attached.communicate(timeout=30)
        assert attached.returncode == 1 and "deleted" in err.decode()
        # The reset took effect before the deletion: messages from 4 on came again.
        assert out.decode().splitlines()[-7:] == [f"{i}\tm{i - 1}" for i in range(4, 11)]
    finally:
        attached.kill()
    gone = dev("topic", "describe", "life")
    assert gone.returncode == 1 and "does not exist" in gone.stderr
    assert dev("pub", "life2", "-q", input="x\n").returncode == 0
    dev("sub", "life2", "gone", "--count", "0")
    assert dev("subscription", "delete", "life2", "gone").returncode == 0
    again = dev("subscription", "delete", "life2", "gone")
    assert again.returncode == 1 and "hedwig subscriptions" in again.stderr


def test_sub_says_what_it_creates_and_a_timeout_with_nothing_received_fails(dev: Cli) -> None:
    """A mistyped topic: ``hedwig sub`` says it creates it; a new subscription says where it
    starts; ``--timeout`` without ``--count`` and nothing received is a failure (1)."""
    typo = dev("sub", "greetinsg", "reader", "--timeout", "1")
    assert typo.returncode == 1, typo.stderr
    assert "topic 'greetinsg' does not exist: subscribing creates it" in typo.stderr
    assert "hedwig topic delete greetinsg" in typo.stderr
    assert "1 s without a message; nothing received" in typo.stderr
    assert dev("pub", "told", input="a\n").returncode == 0
    fresh = dev("sub", "told", "late", "--timeout", "1")
    assert fresh.returncode == 1 and "'late' of 'told' is new" in fresh.stderr
    assert "--earliest" in fresh.stderr
    assert dev("pub", "told", input="b\n").returncode == 0
    again = dev("sub", "told", "late", "--timeout", "2")
    assert again.returncode == 0 and again.stdout == "2\tb\n"  # idle after some: done
    assert "new" not in again.stderr and "does not exist" not in again.stderr


def test_a_new_subscription_starts_at_the_first_kept_message_in_one_step(dev: Cli) -> None:
    assert dev("pub", "kept-early", "-q", input="a\nb\nc\n").returncode == 0
    made = dev("subscription", "create", "kept-early", "first", "--earliest")
    assert made.returncode == 0, made.stderr
    assert made.stdout == (
        "created subscription first of kept-early: delivery starts at 1, the first kept message\n"
    )
    got = dev("sub", "kept-early", "first", "--count", "3", "--timeout", "10")
    assert got.stdout.splitlines() == ["1\ta", "2\tb", "3\tc"], got.stderr
    got = dev("sub", "kept-early", "other", "--earliest", "--count", "3", "--timeout", "10")
    assert got.stdout.splitlines() == ["1\ta", "2\tb", "3\tc"], got.stderr
    # An existing subscription goes on where it is: nothing new, nothing again.
    again = dev("sub", "kept-early", "other", "--earliest", "--timeout", "1")
    assert again.returncode == 1 and again.stdout == ""
    exists = dev("subscription", "create", "kept-early", "first", "--earliest")
    assert exists.returncode == 1


def test_an_attached_subscription_is_taken_over_with_force_attach(dev: Cli) -> None:
    """The busy subscription's error names ``--force-attach``, which ``hedwig sub`` has."""
    assert dev("subscription", "create", "busy", "holder").returncode == 0
    first = background(dev, "sub", "busy", "holder", "--timeout", "60")
    try:
        until_attached(dev, "busy")
        busy = dev("sub", "busy", "holder", "--timeout", "1")
        assert busy.returncode == 1, busy.stderr
        assert "'hedwig sub TOPIC SUBSCRIBER --force-attach' takes it over" in busy.stderr
        taken = background(dev, "sub", "busy", "holder", "--force-attach", "--count", "1")
        _, err = first.communicate(timeout=30)
        assert first.returncode == 1, err  # closed: the other took it over
        assert dev("pub", "busy", input="x\n").returncode == 0
        out, err = taken.communicate(timeout=30)
        assert taken.returncode == 0, err
        assert out.decode() == "1\tx\n"
    finally:
        first.kill()


def test_topic_create_and_config_set_a_topics_own_settings(dev: Cli) -> None:
    """A topic made explicitly with settings of its own, changed later, and the owner taking
    them at its next take-over (``hedwig move``); mistakes exit 2, a missing topic 1."""
    made = dev("topic", "create", "configured", "--max-message-size", "1000", "--json")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["max-message-size"] == 1000
    assert "configured" in dev("topics").stdout  # it exists, with nothing published
    again = dev("topic", "create", "configured")
    assert again.returncode == 1 and "'hedwig topic config configured'" in again.stderr
    big = dev("pub", "configured", input="x" * 2000 + "\n")
    assert big.returncode == 1 and "exceeds the limit of 1000" in big.stderr
    changed = dev("topic", "config", "configured", "--unset", "max-message-size", "--json")
    assert json.loads(changed.stdout)["max-message-size"] is None
    changed = dev(
        "topic", "config", "configured", "--retention-ms", "60000", "--replication", "3/3/2"
    )
    assert changed.returncode == 0 and "next take-over" in changed.stdout
    assert dev("move", "configured").returncode == 0
    assert dev("pub", "configured", input="x" * 2000 + "\n").returncode == 0
    shown = json.loads(dev("topic", "config", "configured", "--json").stdout)
    assert (shown["retention-ms"], shown["replication"]) == (60000, "3/3/2")
    assert dev("topic", "config", "configured", "--replication", "1/2/3").returncode == 2
    assert dev("topic", "config", "configured", "--retention-ms", "soon").returncode == 2
    missing = dev("topic", "config", "not-made")
    assert missing.returncode == 1 and "'hedwig topic create not-made'" in missing.stderr


def test_ledgers_say_when_under_replication_is_the_repairs_normal_course(dev: Cli) -> None:
    """Right after a hub goes, ``ledgers --under-replicated`` lists rows: each says what
    repairs it and when (the re-replication delay, the next audit), not just that it is
    short."""
    assert dev("pub", "repaired", input="a\n").returncode == 0
    gone = json.loads(dev("dev", "status", "--json").stdout)["hubs"][2]["address"]
    assert dev("dev", "kill", "2").returncode == 0
    try:

        def unregistered() -> bool:  # past the session timeout (3 s)
            rows = json.loads(dev("hubs", "--json").stdout or "[]")
            return not any(r["hub"] == gone and r["alive"] for r in rows)

        poll(unregistered, what="the killed hub gone from the registry")
        assert dev("pub", "repaired-short", input="b\n").returncode == 0
        rows = json.loads(dev("ledgers", "--under-replicated", "--json").stdout)
        assert rows and all(r["expected"] for r in rows), rows
        told = {r["topic"]: r["expected"] for r in rows}
        assert "fewer replicas than wanted" in told["repaired-short"]
        table = dev("ledgers", "--under-replicated")
        assert "note: " in table.stderr
        if any(r["dead"] for r in rows):
            assert "120 s after its hub went (--rereplication-delay)" in table.stderr
    finally:
        assert dev("dev", "restart", "2").returncode == 0


def on_a_terminal(cli: Cli, *args: str, stdin: Path | None = None) -> tuple[int, str]:
    """Run ``hedwig`` with stderr on a pseudo-terminal; its exit status and what it wrote there."""
    leader, follower = pty.openpty()
    with open(stdin or os.devnull, "rb") as source:
        proc = subprocess.Popen(
            [sys.executable, "-m", "hedwig", *args],
            stdin=source,
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env=cli.env,
        )
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
        code = proc.wait(60)
    os.close(leader)
    return code, seen.decode(errors="replace")


def test_progress_only_on_a_terminal(dev: Cli) -> None:
    lines = b"".join(b"%099d\n" % i for i in range(200_000))
    source = Path(scratch.mkdtemp()) / "lines"
    source.write_bytes(lines)
    piped = dev("pub", "progress", "-q", input=lines)
    assert piped.returncode == 0 and "\r" not in piped.stderr
    code, text = on_a_terminal(dev, "pub", "progress", "-q", stdin=source)
    assert code == 0
    assert "acknowledged" in text and "\r" in text  # the line rewritten in place, a summary
    # A region listing counts the topics it has read, then clears the line.
    code, text = on_a_terminal(dev, "topics")
    assert code == 0 and "reading topics: " in text and text.endswith("\r")
    listed = dev("topics")
    assert listed.returncode == 0 and listed.stderr == ""


def test_settings_from_the_environment_and_log_level_anywhere(dev: Cli) -> None:
    hub = json.loads(dev("dev", "status", "--json").stdout)["hubs"][1]["address"]
    out = dev("pub", "env-topic", "--log-level", "INFO", input="x\n", HEDWIG_HUB=hub)
    assert out.returncode == 0, out.stderr
    bad = dev("pub", "env-topic", "--log-level", "LOUD", input="x\n")
    assert bad.returncode == 2 and "LOUD" in bad.stderr


def test_moves_that_cannot_happen_say_so(dev: Cli) -> None:
    assert dev("pub", "stays", input="x\n").returncode == 0
    dead = dev("move", "stays", "--to", "127.0.0.1:9")
    assert dead.returncode == 1 and "not an alive hub" in dead.stderr
    missing = dev("move", "no-such-topic")
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_first_mistakes_fail_at_once_and_say_what_to_do() -> None:
    cli = Cli(Path(scratch.mkdtemp()) / "none.json")
    no_hub = cli("pub", "t", input="x\n")
    assert no_hub.returncode == 2 and "hedwig dev up" in no_hub.stderr
    bad_address = cli("pub", "--hub", "localhost", "t", input="x\n")
    assert bad_address.returncode == 2 and "HOST:PORT" in bad_address.stderr
    t0 = time.monotonic()
    no_zk = cli("topics", "--zk", "127.0.0.1:9", timeout=60)
    assert no_zk.returncode == 1 and "cannot reach ZooKeeper" in no_zk.stderr
    assert "Connection refused" not in no_zk.stderr  # the client's own retries stay quiet
    assert time.monotonic() - t0 < 30
    with DevCluster(hubs=1, replication="3/3/2", session_timeout_s=2) as lone:
        t0 = time.monotonic()
        pub = cli("pub", "--hub", lone.addresses[0], "t", input="a\nb\n")
        assert pub.returncode == 1
        assert "start more hubs" in pub.stderr and "1/1/1" in pub.stderr
        assert time.monotonic() - t0 < 10  # at once, not 30 s per message
        assert "Traceback" not in pub.stderr
        big = cli("pub", "--hub", lone.addresses[0], "t", input="y" * 2_000_000 + "\n")
        assert big.returncode == 1 and "line 1 (2,000,000 bytes)" in big.stderr
        assert "yyyy" not in big.stderr  # the message is not echoed
        drain = cli("drain", "--metrics-port", str(lone.hub_procs[0].metrics_port))
        assert drain.returncode == 0  # owns nothing: nothing to strand


@pytest.mark.alone  # a time bound on whole commands
def test_a_mistyped_hub_fails_in_seconds_saying_what_is_there(dev: Cli) -> None:
    """Nothing listening, a host that does not resolve, a hub's metrics port, ZooKeeper's port:
    each fails within a few seconds (not the 30 s retry deadline), saying what is there, with
    exit 1; a list with one hub that answers goes on."""
    status = json.loads(dev("dev", "status", "--json").stdout)
    metrics = status["hubs"][0]["metrics"].removeprefix("http://")
    silent = socket.create_server(("127.0.0.1", 0))  # takes connections, never answers
    for address, told in (
        (f"127.0.0.1:{silent.getsockname()[1]}", "never answered"),
        ("127.0.0.1:9", "nothing listening"),
        ("no-such-host.invalid:4080", "no such host"),
        (metrics, "not a Hedwig hub (a metrics"),
        (status["zk"], "not a Hedwig hub (a metrics or ZooKeeper port?)"),
    ):
        for argv in (("pub", "--hub", address, "t"), ("sub", "--hub", address, "t", "r")):
            t0 = time.monotonic()
            out = dev(*argv, input="x\n")
            assert time.monotonic() - t0 < 10, argv
            assert out.returncode == 1, out.stderr
            assert f"no Hedwig hub at {address} (" in out.stderr and told in out.stderr, out.stderr
            assert "WARNING" not in out.stderr
            assert "check the address (--hub, HEDWIG_HUB)" in out.stderr
            assert "waiting for topic" not in out.stderr and "retrying" not in out.stderr
    silent.close()
    some = f"127.0.0.1:9,{status['hubs'][1]['address']}"
    assert dev("pub", "--hub", some, "mistyped-one", input="x\n").stdout == "1\tx\n"


@pytest.mark.alone  # a timeline of whole commands
def test_pub_gives_up_at_its_deadline_with_stderr_piped_into_head(dev: Cli) -> None:
    """Every hub gone after ``hedwig pub`` started, its stderr a pipe whose reader has exited:
    it still gives up at its retry deadline, with exit 1."""
    pipeline = subprocess.Popen(
        [
            "bash",
            "-c",
            f"(sleep 8; echo x) | {sys.executable} -m hedwig pub headed --retry-deadline 5 "
            "2>&1 >/dev/null | head -c 10; exit ${PIPESTATUS[1]}",
        ],
        stdout=subprocess.PIPE,
        env=dev.env,
    )
    time.sleep(1.5)  # the test's timeline: past the check that a hub answers, before the line
    try:
        for i in range(3):
            assert dev("dev", "kill", str(i)).returncode == 0
        assert pipeline.wait(30) == 1
    finally:
        pipeline.kill()
        for i in range(3):
            dev("dev", "restart", str(i))


@pytest.mark.parametrize(
    "command", [["zk"], ["dev", "up"], ["sim"], ["bench"], ["drain"], ["topic", "config"]]
)
def test_every_option_says_what_it_is(command: list[str]) -> None:
    """``--help`` describes the command and each of its options."""
    out = Cli(Path(scratch.mkdtemp()) / "none.json")(*command, "--help")
    assert out.returncode == 0, out.stderr
    usage, _, body = out.stdout.partition("\n\n")
    assert body.split("\n\n")[0].strip() and not body.startswith("options:"), out.stdout
    lines = body.splitlines()
    for option in sorted(set(re.findall(r"\[(--[a-z-]+)", usage)) - {"--help"}):
        (i,) = [n for n, line in enumerate(lines) if re.match(rf"\s+{option}\b(?!-)", line)]
        described = len(lines[i].split("  ", 2)) > 2 or (
            i + 1 < len(lines) and lines[i + 1].startswith(" " * 10)
        )
        assert described, (command, option, lines[i])


def test_bench_reports_delivery_rate_and_latency(dev: Cli) -> None:
    out = dev("bench", "--subscribe", "--messages", "5000", "--warmup", "1000", timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["publish"]["messages"] == 5000 and result["publish"]["msgs_per_s"] > 0
    delivered = result["subscribe"]
    assert delivered["received"] == delivered["expected"] == 6000
    assert delivered["delivered_per_s"] > 0
    # Every hundredth measured message carries its publish time: 50 samples.
    lat = delivered["publish_to_delivery"]
    assert 0 < lat["p50_ms"] <= lat["p99_ms"] <= lat["max_ms"] < 60_000


def background(dev: Cli, *args: str) -> subprocess.Popen[bytes]:
    """``hedwig ARGS`` running in the background, its output captured."""
    return subprocess.Popen(
        [sys.executable, "-m", "hedwig", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dev.env,
    )


def test_topic_mode_spreads_subscribers_and_shows_the_plan(dev: Cli) -> None:
    assert dev("pub", "hotcli", "-q", input="first\n").returncode == 0
    missing = dev("topic", "mode", "nosuch", "fan-out")
    assert missing.returncode == 1 and "does not exist" in missing.stderr
    done = dev("topic", "mode", "hotcli", "fan-out", "--hubs", "2", "--json")
    assert done.returncode == 0, done.stderr
    (plan,) = json.loads(done.stdout)
    assert plan["mode"] == "fan-out" and len(plan["hubs"].split(",")) == 2
    rows = {r["topic"]: r for r in json.loads(dev("topics", "--json").stdout)}
    assert rows["hotcli"]["mode"] == "fan-out"
    assert rows["hotcli"]["hubs"] == plan["hubs"].split(",")
    assert rows["hotcli"]["owner"] not in rows["hotcli"]["hubs"]
    assert "fan-out" in dev("topics").stdout
    # A subscriber is served by a delivery hub and gets what is published.
    sub = background(dev, "sub", "hotcli", "spread", "--count", "1")
    try:
        # Its subscription made (served by a delivery hub, it is not attached at the owner).
        poll(
            lambda: "spread" in {s["subscription"] for s in subscriptions(dev, "hotcli")},
            what="the subscription spread made",
        )
        assert dev("pub", "hotcli", "-q", input="second\n").returncode == 0
        out, err = sub.communicate(timeout=30)
        assert sub.returncode == 0, err.decode()
        assert out.decode().strip() == "2\tsecond"
    finally:
        sub.kill()
    single = dev("topic", "mode", "hotcli", "single", "--json")
    assert single.returncode == 0 and json.loads(single.stdout)[0]["mode"] == "single"
    rows = {r["topic"]: r for r in json.loads(dev("topics", "--json").stdout)}
    assert rows["hotcli"]["mode"] == "single" and rows["hotcli"]["hubs"] == []


def test_topic_mode_ingest_gives_lanes_and_sub_reads_them(dev: Cli) -> None:
    assert dev("pub", "lanescli", "-q", input="first\n").returncode == 0
    done = dev("topic", "mode", "lanescli", "ingest", "--hubs", "3", "--json")
    assert done.returncode == 0, done.stderr
    (plan,) = json.loads(done.stdout)
    assert plan["mode"] == "ingest" and plan["lanes"] == "0,1,2"
    rows = {r["topic"]: r for r in json.loads(dev("topics", "--json").stdout)}
    assert rows["lanescli"]["mode"] == "ingest" and rows["lanescli"]["lanes"] == "0,1,2"
    assert {"lanescli~lane1", "lanescli~lane2"} <= set(rows)
    # Publishers (one process each, so each its own id) spread over the lanes; a subscriber
    # created before they publish reads every lane, each message saying its lane.
    sub = background(dev, "sub", "lanescli", "reader", "--count", "30")
    try:
        for lane in ("lanescli", "lanescli~lane1", "lanescli~lane2"):
            until_attached(dev, lane)
        for p in range(6):
            lines = "".join(f"p{p}-{i}\n" for i in range(5))
            assert dev("pub", "lanescli", "-q", input=lines).returncode == 0
        out, err = sub.communicate(timeout=60)
        assert sub.returncode == 0, err.decode()
    finally:
        sub.kill()
    got = [line.split("\t") for line in out.decode().splitlines()]
    assert sorted(v for _, v in got) == sorted(f"p{p}-{i}" for p in range(6) for i in range(5))
    assert any(":" in where for where, _ in got), "no message came from a lane other than 0"
    fewer = dev("topic", "mode", "lanescli", "ingest", "--hubs", "2", "--json")
    assert json.loads(fewer.stdout)[0]["lanes"] == "0,1 (2 sealed)"


@pytest.mark.parametrize("store", ["zookeeper", "etcd"])
def test_dev_up_secure_prints_its_credentials_and_the_commands_use_them(
    tmp_path: Path, store: str
) -> None:
    """``hedwig dev up --secure``: the line it prints names the credentials' directory, whose
    ``env`` file makes every command the super-user; without it a command is refused, and
    alice (no ACLs) is refused with her name, the operation and the topic. On etcd (TLS with
    client certificates and etcd's own authentication) the same file reaches the store."""
    cli = Cli(tmp_path / "dev.json")
    log_path = tmp_path / "up.log"
    with open(log_path, "w+b") as log:
        up = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hedwig",
                "dev",
                "up",
                "--hubs",
                "2",
                "--secure",
                "--store",
                store,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=cli.env,
        )
        try:
            until_ready(up, log_path, "dev up --secure")
            (line,) = [x for x in log_path.read_text().splitlines() if x.startswith("SECURE")]
            directory = Path(line.split()[3].rstrip(":"))
            admin: dict[str, str] = {}
            for entry in (directory / "env").read_text().splitlines():
                name, _, value = entry.removeprefix("export ").partition("=")
                admin[name] = value
            assert {"HEDWIG_TLS_CA", "HEDWIG_CERT", "HEDWIG_KEY"} <= set(admin)
            as_admin, as_alice = Cli(tmp_path / "dev.json"), Cli(tmp_path / "dev.json")
            as_admin.env.update(admin)
            done = as_admin("pub", "greetings", input="hello\n")
            assert done.returncode == 0, done.stderr
            assert done.stdout == "1\thello\n"
            done = cli("pub", "greetings", input="anonymous\n")
            assert done.returncode != 0 and "TLS connections only" in done.stderr
            as_alice.env.update(
                admin,
                HEDWIG_CERT=str(directory / "alice.crt"),
                HEDWIG_KEY=str(directory / "alice.key"),
            )
            done = as_alice("pub", "greetings", input="alice\n")
            assert done.returncode != 0
            assert "alice may not publish topic 'greetings'" in done.stderr
            got = as_admin("sub", "greetings", "--peek", "--count", "1")
            assert got.returncode == 0, got.stderr
            assert got.stdout.split("\t")[-1] == "hello\n"
            (ready,) = [x for x in log_path.read_text().splitlines() if x.startswith("READY")]
            url = ready.rpartition("zk=")[2]
            assert url.startswith("etcd://") == (store == "etcd")
            # The endpoint line names the store it is.
            label = "etcd" if store == "etcd" else "zookeeper"
            assert f"{label:<11} {url}" in log_path.read_text().splitlines()
            listed = as_admin("topics", "--zk", url)
            assert listed.returncode == 0, listed.stderr
            assert "greetings" in listed.stdout
            # The owners are asked with the same credentials as pub and sub: the owner's
            # figures, not the store's (which put LAST_SEQ at 0 and the backlog below it).
            (row,) = json.loads(as_admin("topics", "--json").stdout)
            assert (row["last_seq"], row["source"], row["backlog"]) == (1, "owner", 0)
            if store == "zookeeper":
                anonymous = cli("topics", "--json")
                assert anonymous.returncode == 0, anonymous.stderr
                assert "could not ask owner" in anonymous.stderr and "--tls-ca" in anonymous.stderr
                assert json.loads(anonymous.stdout)[0]["source"] == "store"
            # ``hedwig acl`` finds the cluster and its region as the others do, says what it
            # did, lists as JSON, and a wrong operation is a command used wrongly (2).
            bad = as_admin(
                "acl", "add", "x", "--principal", "bob", "--topic", "t", "--operations", "pub"
            )
            assert bad.returncode == 2 and "not pub" in bad.stderr and "publish" in bad.stderr
            added = as_admin(
                "acl", "add", "x", "--principal", "bob", "--topic", "t", "--operations", "read"
            )
            assert added.returncode == 0, added.stderr
            assert added.stdout == "ACL entry x (region default): allow bob read on topic 't'\n"
            (entry,) = json.loads(as_admin("acl", "list", "--json").stdout)
            assert entry["entry"] == "x" and entry["rules"][0]["operations"] == ["read"]
            if store == "zookeeper":
                no_digest = {k: v for k, v in as_admin.env.items() if k != "HEDWIG_ZK_DIGEST"}
                refused = subprocess.run(
                    [sys.executable, "-m", "hedwig", "acl", "delete", "x"],
                    capture_output=True,
                    text=True,
                    env=no_digest,
                )
                assert refused.returncode == 1
                assert "NoAuth" in refused.stderr and "HEDWIG_ZK_DIGEST" in refused.stderr
            deleted = as_admin("acl", "delete", "x")
            assert deleted.stdout == "deleted ACL entry x (region default)\n"
        finally:
            down(cli, up)


def test_dev_up_secure_on_etcd_starts_again_on_its_data_directory(tmp_path: Path) -> None:
    """A second ``hedwig dev up --secure --store etcd --data-dir D`` starts on what the first
    left: its credentials, etcd's users and roles and authentication already on (etcd refuses
    to make them twice), the ports it saved, and the messages published before."""
    cli = Cli(tmp_path / "dev.json")
    data = tmp_path / "data"
    argv = ["dev", "up", "--detach", "--hubs", "2", "--secure", "--store", "etcd"]
    for run in range(2):
        up = cli(*argv, "--data-dir", str(data), timeout=180)
        assert up.returncode == 0, up.stdout + up.stderr
        try:
            admin = Cli(tmp_path / "dev.json")
            for entry in (data / "security" / "env").read_text().splitlines():
                name, _, value = entry.removeprefix("export ").partition("=")
                admin.env[name] = value
            done = admin("pub", "kept", input=f"run {run}\n")
            assert done.returncode == 0, done.stderr
            assert done.stdout == f"{run + 1}\trun {run}\n"
            got = admin("sub", "kept", "--peek", "--count", str(run + 1))
            assert got.returncode == 0, got.stderr
            assert [line.split("\t")[-1] for line in got.stdout.splitlines()] == [
                f"run {r}" for r in range(run + 1)
            ]
        finally:
            down = cli("dev", "down", timeout=120)
            assert down.returncode == 0, down.stderr


def test_a_shared_subscription_from_the_command_line(dev: Cli) -> None:
    """``subscription create --type shared`` with a policy; ``sub --type shared`` acknowledges
    each message it prints, ``--nack`` refuses it (it comes again, counted)."""
    made = dev(
        "subscription", "create", "jobs", "pool", "--type", "shared", "--earliest",
        "--ack-timeout", "10s", "--backoff", "100ms",
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert dev("pub", "jobs", "-q", input="a\nb\nc\n").returncode == 0
    nacked = dev(
        "sub", "jobs", "pool", "--type", "shared", "--nack", "--window", "1", "--count", "1",
        "--print", "deliveries", "--timeout", "10",
    )  # fmt: skip
    assert nacked.stdout.splitlines() == ["1\t1\ta"], nacked.stderr
    got = dev(
        "sub", "jobs", "pool", "--type", "shared", "--count", "3", "--print", "deliveries",
        "--timeout", "10",
    )  # fmt: skip
    lines = [line.split("\t") for line in got.stdout.splitlines()]
    assert [(seq, value) for seq, _, value in lines] == [("1", "a"), ("2", "b"), ("3", "c")]
    # The nacked one comes again counted; the next may have gone to the nacking process too
    # (its room came back with the nack) and been given back when it exited.
    assert lines[0][1] == "2" and lines[2][1] == "1", got.stdout
    done = dev("sub", "jobs", "pool", "--type", "shared", "--timeout", "1")
    assert done.returncode == 1 and done.stdout == ""  # every message acknowledged
    wrong = dev("sub", "jobs", "pool", "--timeout", "1")
    assert wrong.returncode != 0 and "join it as one of its consumers" in wrong.stderr
    cumulative = dev("subscription", "create", "jobs", "cursor", "--max-deliveries", "3")
    assert cumulative.returncode != 0 and "consumes cumulatively" in cumulative.stderr
    keyed = dev("subscription", "create", "jobs", "by-key", "--type", "key-shared")
    assert keyed.returncode == 0, keyed.stderr
    itself = dev(
        "subscription", "create", "jobs", "dl", "--type", "shared", "--max-deliveries", "2",
        "--dead-letter", "jobs",
    )  # fmt: skip
    assert itself.returncode != 0 and "must be another topic" in itself.stderr


def test_a_subscription_starts_at_a_publish_time(dev: Cli) -> None:
    """``--time`` and ``--since`` on ``subscription create`` and ``reset``: delivery starts at
    the first message the owner stored at or after the time (its clock is this machine's)."""
    assert dev("pub", "timed", "-q", input="a\nb\nc\n").returncode == 0
    time.sleep(0.5)
    between = datetime.now(UTC)
    time.sleep(0.5)
    assert dev("pub", "timed", "-q", input="d\ne\n").returncode == 0
    made = dev("subscription", "create", "timed", "late", "--time", between.isoformat())
    assert made.returncode == 0 and "delivery starts at 4" in made.stdout, made.stderr
    got = dev("sub", "timed", "late", "--count", "2", "--timeout", "20")
    assert got.stdout.splitlines() == ["4\td", "5\te"], got.stderr
    back = dev("subscription", "reset", "timed", "late", "--since", "1h")
    assert back.returncode == 0 and "restarts at 1" in back.stdout, back.stderr
    utc = between.replace(tzinfo=None).isoformat()  # no zone: UTC
    again = dev("subscription", "reset", "timed", "late", "--time", utc)
    assert again.returncode == 0 and "restarts at 4" in again.stdout, again.stderr
    bad = dev("subscription", "reset", "timed", "late", "--time", "yesterday")
    assert bad.returncode == 2 and "ISO-8601" in bad.stderr
    both = dev("subscription", "create", "timed", "other", "--since", "1h", "--earliest")
    assert both.returncode == 2 and "not allowed with" in both.stderr
