"""The operator's connections to the pools' ZooKeeper regions.

One ``MetadataStore`` per (connection string, region), opened on first use and kept: Topics and
the pool's worker of one pool share it. The operator only reads and writes metadata through
``hedwig.metadata`` (topic znodes, owner records, load reports); it never imports the hub.
A store that cannot connect is dropped and opened again on the next request. A secured
pool's region is opened with its ZooKeeper digest (``digests``, filled in by the pool's
reconciliation); a store opened before its digest was known is opened again with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping

from hedwig.errors import HedwigError, MetadataUnavailableError
from hedwig.metadata import MetadataStore, open_store

log = logging.getLogger(__name__)

Opener = Callable[[str, str], MetadataStore]
DigestOpener = Callable[[str, str, str | None], MetadataStore]


class MetadataConnections:
    def __init__(
        self,
        opener: Opener | None = None,
        *,
        session_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        digests: Mapping[tuple[str, str], str] | None = None,
    ) -> None:
        self._digests: Mapping[tuple[str, str], str] = digests if digests is not None else {}
        self._opened_with: dict[tuple[str, str], str | None] = {}
        self._opener: DigestOpener = (
            (lambda url, region, digest: opener(url, region))
            if opener is not None
            else (
                lambda url, region, digest: open_store(
                    url, region=region, session_timeout_s=session_timeout_s, digest=digest
                )
            )
        )
        self._connect_timeout_s = connect_timeout_s
        self._stores: dict[tuple[str, str], MetadataStore] = {}
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}

    async def get(self, zk: str, region: str) -> MetadataStore:
        """The store of ``region`` on ``zk``; ``MetadataUnavailableError`` if unreachable."""
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
            store = self._opener(zk, region, digest)
            try:
                await asyncio.wait_for(store.start(), self._connect_timeout_s)
            except (TimeoutError, HedwigError) as exc:
                with contextlib.suppress(Exception):
                    await store.close()
                raise MetadataUnavailableError(
                    f"cannot reach ZooKeeper at {zk} (region {region}): {exc}"
                ) from exc
            self._stores[key] = store
            self._opened_with[key] = digest
            return store

    async def close(self) -> None:
        stores, self._stores = list(self._stores.values()), {}
        for store in stores:
            try:
                await store.close()
            except Exception:  # pragma: no cover - best effort at shutdown
                log.debug("closing a metadata store failed", exc_info=True)
