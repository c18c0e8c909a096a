"""Where each record lives in the ZooKeeper tree (``docs/zookeeper-layout.md``).

Topic and subscriber names pass through ``hedwig.protocol.names.encode_name``, so no name can
reach outside its own node: ``a/b`` is stored as ``a%2Fb``.
"""

from __future__ import annotations

from dataclasses import dataclass

from hedwig.protocol.names import decode_name, encode_name

ROOT = "/hedwig"


@dataclass(frozen=True, slots=True)
class Layout:
    region: str

    def __post_init__(self) -> None:
        encode_name(self.region)  # validates

    @property
    def base(self) -> str:
        return f"{ROOT}/{encode_name(self.region)}"

    @property
    def topics(self) -> str:
        return f"{self.base}/topics"

    @property
    def hosts(self) -> str:
        return f"{self.base}/hosts"

    @property
    def ledgers(self) -> str:
        return f"{self.base}/ledgers"

    @property
    def acls(self) -> str:
        return f"{self.base}/acls"

    def acl(self, name: str) -> str:
        return f"{self.acls}/{encode_name(name)}"

    @property
    def defaults(self) -> str:
        return f"{self.base}/defaults"

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

    @property
    def planned(self) -> str:
        """The index of the topics that have a plan: a child per topic, so a hub learns
        with one watched read which topics are spread, not with a watch per topic."""
        return f"{self.base}/planned"

    def planned_marker(self, topic: str) -> str:
        return f"{self.planned}/{encode_name(topic)}"

    def persistence(self, topic: str) -> str:
        return f"{self.topic(topic)}/ledgers"

    def subscribers(self, topic: str) -> str:
        return f"{self.topic(topic)}/subscribers"

    def subscriber(self, topic: str, subscriber: str) -> str:
        return f"{self.subscribers(topic)}/{encode_name(subscriber)}"

    def host(self, address: str) -> str:
        return f"{self.hosts}/{encode_name(address)}"

    def alive(self, address: str) -> str:
        return f"{self.host(address)}/alive"

    def ledger(self, ledger_id: int) -> str:
        return f"{self.ledgers}/L{ledger_id:010d}"

    @property
    def ledger_ids(self) -> str:
        return f"{self.base}/ledger-ids"

    @staticmethod
    def ledger_id_of(znode: str) -> int:
        return int(znode.rsplit("/", 1)[-1].lstrip("L"))

    @staticmethod
    def name_of(znode: str) -> str:
        return decode_name(znode.rsplit("/", 1)[-1])
