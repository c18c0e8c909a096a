"""The memory store's subscriptions (``SubscriptionDataManager``), with partial updates: a
record's preferences and state are separate parts, and an update sets only those it holds."""

from __future__ import annotations

from hedwig.errors import NoSuchSubscriptionError, SubscriptionExistsError
from hedwig.metadata.memory.session import MemorySession
from hedwig.metadata.records import SubscriptionData, Version, Versioned


class MemorySubscriptions(MemorySession):
    def is_partial_update_supported(self) -> bool:
        return True

    async def create_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData
    ) -> Version:
        key = self._k("sub", topic, subscriber)
        if self._get(key) is not None:
            raise SubscriptionExistsError(f"{topic}/{subscriber}")
        return Version(self._create(key, data).version)

    async def update_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        key = self._k("sub", topic, subscriber)
        e = self._get(key)
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        if e is None:
            raise missing
        return Version(self._set(key, data.merged_into(e.value), version, missing))

    async def replace_subscription_data(
        self, topic: str, subscriber: str, data: SubscriptionData, version: Version
    ) -> Version:
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        return Version(self._set(self._k("sub", topic, subscriber), data, version, missing))

    async def delete_subscription_data(self, topic: str, subscriber: str, version: Version) -> None:
        missing = NoSuchSubscriptionError(f"{topic}/{subscriber}")
        self._delete(self._k("sub", topic, subscriber), version, missing)

    async def read_subscription_data(
        self, topic: str, subscriber: str
    ) -> Versioned[SubscriptionData] | None:
        e = self._get(self._k("sub", topic, subscriber))
        return None if e is None else Versioned(e.value, Version(e.version))

    async def read_subscriptions(self, topic: str) -> dict[str, Versioned[SubscriptionData]]:
        self._check()
        prefix = self._k("sub", topic)
        return {
            k[-1]: Versioned(e.value, Version(e.version))
            for k, e in self._b.data.items()
            if k[:-1] == prefix
        }
