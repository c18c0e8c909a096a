"""Where each record lives in the ZooKeeper tree (``docs/zookeeper-layout.md``).

Topic and subscriber names pass through ``hedwig.protocol.names.encode_name``, so no name can
reach outside its own node: ``a/b`` is stored as ``a%2Fb``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hedwig.protocol.names import decode_name, encode_name

ROOT = "/hedwig"


@dataclass(frozen=True, slots=True)
class Layout:
    region: str
    # The region's own nodes, named once: every record's path starts with one of them, and a
    # claim names five records.
    base: str = field(init=False)
    topics: str = field(init=False)
    hosts: str = field(init=False)
    ledgers: str = field(init=False)
    acls: str = field(init=False)
    defaults: str = field(init=False)
    # The index of the topics that have a plan: a child per topic, so a hub learns with one
    # watched read which topics are spread, not with a watch per topic.
    planned: str = field(init=False)
    ledger_ids: str = field(init=False)
    # The region's bundle map (``hedwig.metadata.bundles``), and its bundles' owner records,
    # a child each: one watched listing says which bundles are owned.
    bundle_map: str = field(init=False)
    bundle_owners: str = field(init=False)
    # Namespaces' policies, a child each, and their counts of topics: a child per namespace
    # whose data is the count, with a marker child per topic counted.
    namespaces: str = field(init=False)
    namespace_topics: str = field(init=False)

    def __post_init__(self) -> None:
        base = f"{ROOT}/{encode_name(self.region)}"  # (validates the region's name)
        object.__setattr__(self, "base", base)
        for node in ("topics", "hosts", "ledgers", "acls", "defaults", "planned"):
            object.__setattr__(self, node, f"{base}/{node}")
        object.__setattr__(self, "ledger_ids", f"{base}/ledger-ids")
        object.__setattr__(self, "bundle_map", f"{base}/bundle-map")
        object.__setattr__(self, "bundle_owners", f"{base}/bundle-owners")
        object.__setattr__(self, "namespaces", f"{base}/namespaces")
        object.__setattr__(self, "namespace_topics", f"{base}/namespace-topics")

    def namespace(self, name: str) -> str:
        """Namespace ``name``'s policy (``tenant/namespace`` is ``tenant%2Fnamespace``)."""
        return f"{self.namespaces}/{encode_name(name)}"

    def namespace_count(self, name: str) -> str:
        return f"{self.namespace_topics}/{encode_name(name)}"

    def namespace_marker(self, name: str, topic: str) -> str:
        return f"{self.namespace_count(name)}/{encode_name(topic)}"

    def bundle_owner(self, bundle: str) -> str:
        """The owner record of ``bundle`` (a ``Bundle.name``: hex digits and ``_`` alone)."""
        return f"{self.bundle_owners}/{bundle}"

    def acl(self, name: str) -> str:
        return f"{self.acls}/{encode_name(name)}"

    def topic(self, topic: str) -> str:
        return f"{self.topics}/{encode_name(topic)}"

    OWNER = "hub"

    def owner(self, topic: str) -> str:
        return self.owner_of_key(encode_name(topic))

    def owner_of_key(self, key: str) -> str:
        """The owner record of the topic whose encoded name is ``key`` (a caller that keeps
        the key anyway encodes the name once)."""
        return f"{self.topics}/{key}/{self.OWNER}"

    def plan(self, topic: str) -> str:
        return f"{self.topic(topic)}/plan"

    def planned_marker(self, topic: str) -> str:
        return f"{self.planned}/{encode_name(topic)}"

    def persistence(self, topic: str) -> str:
        return f"{self.topics}/{encode_name(topic)}/ledgers"

    def subscribers(self, topic: str) -> str:
        return f"{self.topics}/{encode_name(topic)}/subscribers"

    def subscriber(self, topic: str, subscriber: str) -> str:
        return f"{self.subscribers(topic)}/{encode_name(subscriber)}"

    def host(self, address: str) -> str:
        return f"{self.hosts}/{encode_name(address)}"

    def alive(self, address: str) -> str:
        return f"{self.host(address)}/alive"

    def ledger(self, ledger_id: int) -> str:
        return f"{self.ledgers}/L{ledger_id:010d}"

    @staticmethod
    def ledger_id_of(znode: str) -> int:
        return int(znode.rsplit("/", 1)[-1].lstrip("L"))

    @staticmethod
    def name_of(znode: str) -> str:
        return decode_name(znode.rsplit("/", 1)[-1])
