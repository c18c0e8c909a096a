"""The hub: serves publish and subscribe for the topics it owns, redirects for the rest.

- ``config``: settings, from flags and ``HEDWIG_*`` environment variables.
- ``hub``: wires the parts together, starts and stops them.
- ``server``: the front end that turns frames into calls, and answers (the error boundary).
- ``requests``: what each request does (publish, subscribe, read, move, the storage role).
- ``ownership``: claiming, watching and releasing topics, one state machine.
- ``topic``: an owned topic: its log, publishers' duplicate detection, subscriptions.
- ``subscription``: delivery to one subscriber, flow control and consume marks.
- ``dedup``: publishers' last sequences, for duplicate detection.
- ``loops``: periodic work (load reports, flushes, garbage collection, audit, balancing).
- ``load``: load reports' rates; ``events`` and ``metrics``: what happens, counted.
- ``http``: ``/metrics``, ``/healthz``, ``/readyz``, ``/drain``.
"""

from hedwig.hub.config import HubConfig
from hedwig.hub.hub import Hub, serve

__all__ = ["Hub", "HubConfig", "serve"]
