"""The operator's connections to the pools' ZooKeeper regions.

One ``MetadataStore`` per (connection string, region), opened on first use and kept: Topics and
the pool's worker of one pool share it. The operator only reads and writes metadata through
``hedwig.metadata`` (topic znodes, owner records, load reports); it never imports the hub.
A store that cannot connect is dropped and opened again on the next request. A secured
pool's region is opened with its ZooKeeper digest (``digests``, filled in by the pool's
reconciliation); a store opened before its digest was known is opened again with it. A pool on
a secured etcd names a Secret (``spec.metadata.secretName``): its store is opened with what the
Secret holds (``EtcdAccess``: credentials, CA, client certificate), read when the store is
opened; a store etcd refuses is dropped, so a corrected Secret is read at the next request, and
an open store reads the Secret's credentials again when etcd refuses its token (a rotated
password). The reader reads only a Secret bound to the pool (``ownership.read_access``): any
other is refused as unavailable, and an open store whose Secret stops being bound gets no
credentials from it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace

from hedwig.errors import HedwigError, MetadataUnavailableError
from hedwig.metadata import EtcdAccess, MetadataStore, open_store
from hedwig_operator.ownership import SecretRefusedError
from hedwig_operator.specs import AccessSecret, PoolSpec

log = logging.getLogger(__name__)

Opener = Callable[[str, str], MetadataStore]
AccessOpener = Callable[[str, str, str | None, EtcdAccess | None], MetadataStore]
# The access Secret -> its data (empty: no such Secret); SecretRefusedError if it is not bound
# to its pool (``ownership.read_access``).
SecretReader = Callable[[AccessSecret], Awaitable[Mapping[str, bytes]]]


class MetadataConnections:
    def __init__(
        self,
        opener: Opener | None = None,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        digests: Mapping[tuple[str, str], str] | None = None,
        read_secret: SecretReader | None = None,
    ) -> None:
        self._digests: Mapping[tuple[str, str], str] = digests if digests is not None else {}
        self._read_secret = read_secret
        self._opened_with: dict[tuple[str, str], str | None] = {}
        self._opener: AccessOpener = (
            (lambda url, region, digest, access: opener(url, region))
            if opener is not None
            else (
                lambda url, region, digest, access: open_store(
                    url,
                    region=region,
                    session_timeout_s=session_timeout_s,
                    digest=digest,
                    etcd_access=access,
                )
            )
        )
        self._connect_timeout_s = connect_timeout_s
        self._stores: dict[tuple[str, str], MetadataStore] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def for_pool(self, pool: PoolSpec) -> MetadataStore:
        """The store of ``pool``'s region. A secured pool on ZooKeeper is opened with its
        digest only: opened without it, the store would make the region's znodes open to
        anyone, and the pool's hubs refuse a region others may write to
        (``RegionNotProtectedError``). Until the pool's reconciliation has read its digest
        this is ``MetadataUnavailableError``, and the caller tries again later."""
        key = (pool.metadata_url, pool.region)
        if pool.zookeeper_digest_required and key not in self._digests:
            raise MetadataUnavailableError(
                f"the ZooKeeper digest of pool {pool.name} is not known yet (its Secret "
                f"{pool.name}-zookeeper): its region is opened with it alone"
            )
        return await self.get(pool.metadata_url, pool.region, pool.store_secret)

    async def get(self, zk: str, region: str, secret: AccessSecret | None = None) -> MetadataStore:
        """The store of ``region`` on ``zk``, opened with the etcd access Secret ``secret`` if
        given; ``MetadataUnavailableError`` if unreachable, refused, or the Secret is missing
        or not bound to its pool."""
        key = (zk, region)
        store = self._stores.get(key)
        if store is not None and self._opened_with.get(key) != self._digests.get(key):
            # The pool's digest became known after the store was opened without it.
            self._stores.pop(key, None)
            with contextlib.suppress(Exception):
                await store.close()
            store = None
        if store is not None:
            return store
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            store = self._stores.get(key)
            if store is not None:
                return store
            digest = self._digests.get(key)
            access = await self._access(secret) if secret is not None else None
            try:
                store = self._opener(zk, region, digest, access)
            except HedwigError as exc:  # a URL or Secret it cannot use
                raise MetadataUnavailableError(f"{zk} (region {region}): {exc}") from exc
            try:
                await asyncio.wait_for(store.start(), self._connect_timeout_s)
            except (TimeoutError, HedwigError) as exc:
                with contextlib.suppress(Exception):
                    await store.close()
                raise MetadataUnavailableError(
                    f"cannot reach the metadata store at {zk} (region {region}): {exc}"
                ) from exc
            self._stores[key] = store
            self._opened_with[key] = digest
            return store

    async def _access(self, secret: AccessSecret) -> EtcdAccess:
        where = f"{secret.namespace}/{secret.name}"
        if self._read_secret is None:
            raise MetadataUnavailableError(f"no way to read the Secret {where}")
        try:
            data = await self._read_secret(secret)
        except SecretRefusedError as exc:
            raise MetadataUnavailableError(exc.message) from exc
        if not data:
            raise MetadataUnavailableError(
                f"the metadata store's access Secret {where} does not exist (yet)"
            )
        read = self._read_secret

        async def credentials() -> str | None:
            # Read again when etcd refuses the store's token: a rotated password (none from
            # a Secret that is no longer bound to the pool).
            try:
                return (await read(secret)).get("credentials", b"").decode() or None
            except SecretRefusedError:
                return None

        return replace(EtcdAccess.from_files(data), credentials_source=credentials)

    async def close(self) -> None:
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            try:
                await store.close()
            except Exception:  # pragma: no cover - best effort at shutdown
                log.debug("closing a metadata store failed", exc_info=True)
