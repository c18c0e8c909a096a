"""The chart's NOTES, run as a user pastes them: step 2's ``kubectl run`` commands, the
subscriber in one terminal and the publisher in another, with the bed's kubectl."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable

from tests.chart.notes import step


def split_terminals(notes: str) -> tuple[str, str]:
    """Step 2's subscriber's and publisher's commands (each terminal's lines)."""
    commands = step(notes, 2)
    both = commands[commands.index("# terminal 1") :]
    sub, _, pub = both.partition("# terminal 2")
    return sub, pub


def values(output: str) -> list[str]:
    """The messages of ``SEQ<TAB>MESSAGE`` lines."""
    return [line.split("\t", 1)[1] for line in output.splitlines() if "\t" in line]


def run_notes(
    notes: str, env: dict[str, str], subscriber_running: Callable[[], bool], timeout: float
) -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
    """Run the subscriber, wait until its pod runs, run the publisher; both outcomes."""
    sub_cmd, pub_cmd = split_terminals(notes)
    sub = subprocess.Popen(
        ["bash", "-e", "-c", sub_cmd],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not subscriber_running():
            assert sub.poll() is None, sub.communicate()
            assert time.monotonic() < deadline, "the NOTES' subscriber pod never ran"
            time.sleep(1)
        time.sleep(3)  # its subscription is made before anything is published
        pub = subprocess.run(
            ["bash", "-e", "-c", pub_cmd], env=env, capture_output=True, text=True, timeout=timeout
        )
        out, err = sub.communicate(timeout=timeout)
    finally:
        sub.kill()
    return subprocess.CompletedProcess(sub.args, sub.returncode, out, err), pub


def dry_run(notes: str, env: dict[str, str]) -> dict[str, dict[str, object]]:
    """Each of step 2's ``kubectl run`` commands as pasted, with ``--dry-run=server -o json``
    instead of ``--rm -i``: the pod the API server would create, by name (a control plane
    without a kubelet runs no pod, but merges and admits it as a real one does)."""
    pods = {}
    for commands in split_terminals(notes):
        name = "hedwig-sub" if "run hedwig-sub " in commands else "hedwig-pub"
        # Attaching (--rm -i) is what a dry run cannot do; the pod is the same without it.
        dry = commands.replace(f"run {name} --rm -i ", f"run {name} --dry-run=server -o json ")
        assert dry != commands, commands
        done = subprocess.run(["bash", "-e", "-c", dry], env=env, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        pods[name] = json.loads(done.stdout)
    return pods
