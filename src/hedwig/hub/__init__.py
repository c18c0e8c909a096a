"""The hub: serves publish and subscribe for the topics it owns, redirects for the rest.

- ``config``: settings, from flags and ``HEDWIG_*`` environment variables.
- ``ownership``: claiming, watching and releasing topics (seed 000), one state machine.
- ``topic``: an owned topic: its log, publishers' duplicate detection, subscriptions.
- ``subscription``: delivery to one subscriber, flow control and consume marks.
- ``server``: the TCP front end that turns frames into calls and answers.
- ``http``: ``/metrics``, ``/healthz``, ``/readyz``.
- ``app``: wires it all and runs until SIGTERM.
"""

from hedwig.hub.app import Hub
from hedwig.hub.config import HubConfig

__all__ = ["Hub", "HubConfig"]
