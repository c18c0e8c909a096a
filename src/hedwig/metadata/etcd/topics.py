"""The topic catalog and the subscriptions on etcd.

A topic exists while ``topics/<T>`` does; its value is the topic's configuration (empty: the
region's defaults). Deleting a topic deletes its owner record, persistence record, plan and
every subscription (one range under ``subscribers/<T>/``) in one transaction.

Subscriptions are stored whole, as on ZooKeeper (``is_partial_update_supported`` False): etcd
values are opaque, a partial update would be a read-modify-write anyway, and the owner holds the
whole record when it writes a consume mark.
"""

from __future__ import annotations

from hedwig.errors import (
    BadVersionError,
    MetadataError,
    NoSuchSubscriptionError,
    SubscriptionExistsError,
)
from hedwig.metadata.etcd.client import EtcdClient
from hedwig.metadata.etcd.keys import Keys, create_key, delete_key, set_key
from hedwig.metadata.etcd.kv import Item, delete
from hedwig.metadata.etcd.wire import missing, put
from hedwig.metadata.records import NEW_VERSION, SubscriptionData, TopicConfig, Version, Versioned


def config_of(got: Item | None) -> Versioned[TopicConfig] | None:
    """A topic's key holds its configuration (empty: the region's defaults)."""
    return None if got is None else Versioned(TopicConfig.from_json(got.value), Version(got.mod))


class EtcdTopics:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    async def ensure_topic(self, topic: str) -> bool:
        key = self._keys.topic(topic)
        return (await self._etcd.txn([missing(key)], [put(key, b"")])).succeeded

    async def topic_exists(self, topic: str) -> bool:
        return await self._etcd.get(self._keys.topic(topic)) is not None

    async def read_topic_config(self, topic: str) -> Versioned[TopicConfig] | None:
        return config_of(await self._etcd.get(self._keys.topic(topic)))

    async def write_topic_config(
        self, topic: str, config: TopicConfig, version: Version
    ) -> Version:
        key = self._keys.topic(topic)
        if version == NEW_VERSION:
            return await create_key(self._etcd, key, config.to_json())
        try:
            return await set_key(self._etcd, key, config.to_json(), version)
        except LookupError as exc:
            raise MetadataError(f"topic {topic!r} does not exist") from exc

    async def list_topics(self) -> list[str]:
        items, _ = await self._etcd.range(self._keys.family("topics"), keys_only=True)
        return sorted(Keys.name_of(i.key) for i in items)

    async def delete_topic(self, topic: str) -> None:
        k = self._keys
        await self._etcd.txn(
            [],
            [
                delete(k.topic(topic)),
                delete(k.owner(topic)),
                delete(k.persistence(topic)),
                delete(k.subscribers(topic), prefix=True),
                delete(k.plan(topic)),
            ],
        )

    async def read_region_defaults(self) -> TopicConfig:
        got = await self._etcd.get(self._keys.defaults)
        return TopicConfig.from_json(got.value) if got else TopicConfig()

    async def write_region_defaults(self, config: TopicConfig) -> None:
        await self._etcd.txn([], [put(self._keys.defaults, config.to_json())])


class EtcdSubscriptions:
    def __init__(self, etcd: EtcdClient, keys: Keys) -> None:
        self._etcd = etcd
        self._keys = keys

    def is_partial_update_supported(self) -> bool:
        return False

    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        try:
            return await create_key(
                self._etcd, self._keys.subscriber(topic, subscriber), data.to_json()
            )
        except BadVersionError as exc:
            raise SubscriptionExistsError(f"{topic}/{subscriber}") from exc

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        if data.preferences is None or data.state is None:
            raise MetadataError(
                "etcd stores subscriptions whole: an update must carry preferences and state"
            )
        return await self.replace_subscription_data(topic, subscriber, data, version)

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        try:
            return await set_key(
                self._etcd, self._keys.subscriber(topic, subscriber), data.to_json(), version
            )
        except LookupError as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc

    async def delete_subscription_data(self, topic: str, subscriber: str, version: Version) -> None:
        try:
            await delete_key(self._etcd, self._keys.subscriber(topic, subscriber), version)
        except LookupError as exc:
            raise NoSuchSubscriptionError(f"{topic}/{subscriber}") from exc

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None:
        got = await self._etcd.get(self._keys.subscriber(topic, subscriber))
        if got is None:
            return None
        return Versioned(SubscriptionData.from_json(got.value), Version(got.mod))

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]:
        items, _ = await self._etcd.range(self._keys.subscribers(topic))
        return {
            Keys.name_of(i.key): Versioned(SubscriptionData.from_json(i.value), Version(i.mod))
            for i in items
        }
