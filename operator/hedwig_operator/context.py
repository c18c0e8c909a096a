"""What every reconciler needs, passed explicitly (tests build one with fakes)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hedwig.clock import Clock, SystemClock
from hedwig_operator.hubs import HubRequests
from hedwig_operator.kube import KubeApi
from hedwig_operator.metadata import MetadataConnections
from hedwig_operator.security import PoolTrust
from hedwig_operator.settings import OperatorSettings


@dataclass
class Context:
    kube: KubeApi
    metadata: MetadataConnections
    hubs: HubRequests
    settings: OperatorSettings = field(default_factory=OperatorSettings)
    clock: Clock = field(default_factory=SystemClock)
    # Secured pools' CAs and digests, and the operator's own token (filled in as pools are
    # reconciled).
    trust: PoolTrust = field(default_factory=PoolTrust)
