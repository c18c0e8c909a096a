"""The hub: serves publish and subscribe for the topics it owns, redirects for the rest.

Its parts stand in wings, each a folder named for what it holds; a wing imports only the wings
below it (``pyproject.toml``'s import-linter layers):

- ``process``: the hub process: wires the parts together, starts and stops them; its periodic
  work (load reports, flushes, garbage collection, audit, balancing); ``/metrics``,
  ``/healthz``, ``/readyz`` and ``/drain``.
- ``requests``: what each request does, one path per request: the topic requests, the
  subscription requests (through the one seam that says where a subscription is served), moves,
  and the storage role's hub-to-hub requests in a handler of their own.
- ``spreading``: a topic served by several hubs: fan-out delivery hubs, ingest lanes, the plans
  they follow, and a delivery hub's tail of the owner's log.
- ``owning``: which topics this hub owns (claiming, watching, releasing: one state machine), an
  owned topic (its log, publishers' duplicate detection), placement choices, the region's other
  hubs and their witness of this hub's session.
- ``serving``: delivery to subscribers: a topic's subscription table, one subscription's flow
  control and consume mark.
- ``front``: the door: connections, frames to calls and answers back (the one error
  boundary), TLS, authentication and authorization.
- ``reporting``: what happens, reported (``events``) and counted (``metrics``); load rates.

Its settings (``HubConfig``, grouped) live below it, in ``hedwig.settings``, where the
commands and the operator read the same declarations.
"""

from hedwig.hub.process.hub import Hub
from hedwig.hub.process.serve import serve
from hedwig.settings import HubConfig

__all__ = ["BundleSettings", "Hub", "HubConfig", "serve"]
