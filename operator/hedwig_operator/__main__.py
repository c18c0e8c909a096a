"""``python -m hedwig_operator``: run the operator (kopf) with Hedwig's handlers.

Watches the namespaces given with ``--namespace`` (repeatable; default all namespaces, which
needs the ClusterRole bound cluster-wide). It always runs standalone, without kopf's peering:
run a single replica (the reference Deployment does); peering would need kopf's peering CRDs
and their RBAC.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import kopf


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="hedwig_operator", description=__doc__)
    parser.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=[n for n in os.environ.get("HEDWIG_OPERATOR_NAMESPACES", "").split(",") if n],
        help="namespace to watch (repeatable); default: every namespace",
    )
    parser.add_argument(
        "--liveness",
        default=os.environ.get("HEDWIG_OPERATOR_LIVENESS"),
        help="e.g. http://0.0.0.0:8080/healthz",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(os.environ.get("HEDWIG_OPERATOR_METRICS_PORT") or 0),
        help="serve the operator's Prometheus metrics (hedwig_operator.metrics) on this port; "
        "0: not served",
    )
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    if args.metrics_port:
        from hedwig_operator.metrics import serve

        serve(args.metrics_port)

    import hedwig_operator.handlers  # noqa: F401 - registers the handlers

    kopf.configure(verbose=args.verbose, log_prefix=True)
    kopf.run(
        standalone=True,
        namespaces=args.namespace,
        clusterwide=not args.namespace,
        liveness_endpoint=args.liveness,
    )


if __name__ == "__main__":
    main()
