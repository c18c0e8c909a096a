"""One driver process: a producer or a consumer against one system, reporting JSON lines.

    python -m bench.peers.driver hedwig|kafka produce|consume BOOTSTRAP SPEC [CONFIG_JSON]

``SPEC`` is the role's spec as JSON, or ``@PATH`` of a file holding it (10,000 topic names
do not fit in a command line).

It prints ``{"event": "ready"}`` (consumer attached), ``{"event": "warm"}`` (a producer told to
wait for the others past its warm-up: it goes on at a line on its standard input),
``{"event": "measuring"}`` (producer past its warm-up) and finally ``{"event": "result",
...}``, one JSON object a line, so the harness can sample the servers' CPU time over exactly
the measured part and start the producers only once the consumers are attached. A consumer
waits for a line on its standard input saying the producers are done before its time budget
starts to run.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from bench.peers.workloads import ConsumeSpec, ProduceSpec


def emit(event: dict[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def main(argv: list[str]) -> None:
    system, role, bootstrap, raw_spec = argv[:4]
    config: dict[str, Any] = json.loads(argv[4]) if len(argv) > 4 else {}
    if raw_spec.startswith("@"):
        with open(raw_spec[1:]) as f:
            raw_spec = f.read()
    fields = json.loads(raw_spec)
    spec: ProduceSpec | ConsumeSpec = (
        ProduceSpec(**fields) if role == "produce" else ConsumeSpec(**fields)
    )
    hubs = bootstrap.split(",")
    if system == "hedwig":
        from bench.peers import hedwig_driver

        result = hedwig_driver.run(role, hubs, spec, emit)
    else:
        from bench.peers import kafka_driver

        result = kafka_driver.run(role, hubs, spec, config, emit)
    emit({"event": "result", **result})


if __name__ == "__main__":
    main(sys.argv[1:])
