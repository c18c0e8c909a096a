"""Settings: grouped, typed, each declared once, and one parser for flags and environment.

A setting is a field of a frozen, slotted dataclass group, declared with ``setting``: its
unit in its name or type, the reason for its default beside it, its flag and its
``HEDWIG_*`` variable derived from its name or given (``declaration``). One parser
(``sources``) turns flags and variables into groups and groups back into variables, for
every program that reads or writes them: the hub (``hub``, ``security``), the client
commands that share its metadata URL and region, and the operator's ConfigMap.

A low layer: it depends on the errors, the metadata records and the placement policies,
never on the hub, the client, the commands or the operator.
"""

from hedwig.settings.declaration import Declared, Setting, setting
from hedwig.settings.hub import (
    AuditSettings,
    BalanceSettings,
    BundleSettings,
    ConnectionSettings,
    DeliverySettings,
    HttpSettings,
    HubConfig,
    PlacementSettings,
    QueueSettings,
    RetentionSettings,
    StorageSettings,
    TopicSettings,
    parse_replication,
)
from hedwig.settings.replication import RegionLink, ReplicationSettings, parse_links
from hedwig.settings.security import SecuritySettings
from hedwig.settings.sources import (
    add_flag,
    add_flags,
    changed,
    command_line,
    environment,
    from_environment,
    given_flags,
    load,
    lookup,
)

__all__ = [
    "AuditSettings",
    "BalanceSettings",
    "BundleSettings",
    "ConnectionSettings",
    "Declared",
    "DeliverySettings",
    "HttpSettings",
    "HubConfig",
    "PlacementSettings",
    "QueueSettings",
    "RegionLink",
    "ReplicationSettings",
    "RetentionSettings",
    "SecuritySettings",
    "Setting",
    "StorageSettings",
    "TopicSettings",
    "add_flag",
    "add_flags",
    "changed",
    "command_line",
    "environment",
    "from_environment",
    "given_flags",
    "load",
    "lookup",
    "parse_links",
    "parse_replication",
    "setting",
]
