"""Hedwig: topic-managed publish/subscribe.

Hubs own topics through ephemeral ZooKeeper znodes, append messages to per-topic ledgers, and
deliver them in order to subscribers. The packages are layered (enforced by import-linter):

- ``hedwig.protocol``: the sans-IO wire codec shared by hubs and clients.
- ``hedwig.metadata``: ownership, persistence and subscription metadata with versioned CAS.
- ``hedwig.ledger``: per-topic logs made of ledgers with a single writer each.
- ``hedwig.placement``: pure policies that choose hubs for topics.
- ``hedwig.hub`` and ``hedwig.client``: the server and the client library.
- ``hedwig.cli``: the ``hedwig`` command.
"""

__version__ = "0.1.0"
