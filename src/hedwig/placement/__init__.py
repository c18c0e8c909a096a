"""Placement: which hub should own a topic or a bundle. Pure functions of a load snapshot.

Shared by hubs (choosing a hub for an unowned topic) and tools; no I/O here. ``choice``
places topics, ``bundles`` places bundles on the consistent-hash ring, says which a joining
hub takes and which split or merge; ``rebalance`` moves by load.
"""

from hedwig.placement.choice import POLICIES, PlacementPolicy, choose_hub
from hedwig.placement.rebalance import Move, RebalanceConfig, Rebalancer

__all__ = ["POLICIES", "Move", "PlacementPolicy", "RebalanceConfig", "Rebalancer", "choose_hub"]
