"""The development cluster's state file: written whole, by more than one thread at once."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from hedwig.devcluster.control import write_state


def test_state_written_by_two_threads_at_once_stays_whole(tmp_path: Path) -> None:
    # ``dev kill`` makes the control server and ``dev up``'s watch loop write it together.
    path = tmp_path / "dev.json"
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            for i in range(300):
                write_state(path, {"writer": n, "i": i, "hubs": [{"index": 0}] * 50})
        except BaseException as exc:  # collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert json.loads(path.read_text())["i"] == 299
    assert [p.name for p in tmp_path.iterdir()] == ["dev.json"]
