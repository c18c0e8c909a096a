"""Secured pools' ZooKeeper regions, made by the operator before their hubs start.

ZooKeeper's ``/hedwig`` is closed to creation by anyone but one admin digest
(``hedwig.metadata.zookeeper.regions``): otherwise whoever reaches ZooKeeper could take a
region's name before its pool's first hub, or make znodes there without limit. Pools with
their own digests share one ensemble, and only the operator knows every one, so it holds the
admin digest (``HEDWIG_ZK_ADMIN_DIGEST_FILE``, which the chart mounts from the Secret its
ZooKeeper's super-user is set from) and makes each secured pool's region node, with that
pool's digest's ACL, when it reconciles the pool, before the pool's StatefulSet is applied.
The hubs then find their region made and theirs (they check it), and never need to create
under ``/hedwig``.

Without an admin digest (an ensemble the chart does not run) nothing is made here: the
first secured store to make ``/hedwig`` closes it to its own digest, which serves one
secured pool per ensemble; more need the admin digest. A region is made once per operator
process; one that cannot be made now (ZooKeeper unreachable, ``/hedwig`` not the admin's) is
logged and tried again at the pool's next reconciliation, while its hubs wait refused.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field

from hedwig.errors import HedwigError
from hedwig.metadata.zookeeper.regions import make_region
from hedwig_operator.specs import PoolSpec

log = logging.getLogger(__name__)

ADMIN_DIGEST_FILE_ENV = "HEDWIG_ZK_ADMIN_DIGEST_FILE"

# (ZooKeeper URL, region, admin digest, the region's digest) -> made now
Maker = Callable[[str, str, str, str], Awaitable[bool]]


async def _make(url: str, region: str, admin_digest: str, region_digest: str) -> bool:
    return await make_region(url, region, admin_digest=admin_digest, region_digest=region_digest)


@dataclass
class PoolRegions:
    """The admin digest, if the operator has one, and the regions made with it."""

    admin_digest: str | None = None
    maker: Maker = _make
    made: set[tuple[str, str]] = field(default_factory=set)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PoolRegions:
        env = os.environ if environ is None else environ
        path = env.get(ADMIN_DIGEST_FILE_ENV, "")
        if not path or not os.path.isfile(path):
            return cls()
        with open(path, encoding="utf-8") as f:
            return cls(admin_digest=f.read().strip() or None)

    async def ensure(self, pool: PoolSpec, digest: str | None) -> bool:
        """The region of a secured pool on ZooKeeper made with ``digest``'s ACL (once); True
        if it is known made (by now or before), False if there is nothing to make it with
        (no admin digest, or the pool's digest not known yet) or making it failed (logged)."""
        key = (pool.metadata_url, pool.region)
        if key in self.made:
            return True
        if not pool.zookeeper_digest_required or not self.admin_digest or not digest:
            return False
        try:
            made = await self.maker(pool.metadata_url, pool.region, self.admin_digest, digest)
        except HedwigError as exc:
            log.warning(
                "pool %s/%s: cannot make its region %r in ZooKeeper yet: %s",
                pool.namespace,
                pool.name,
                pool.region,
                exc,
            )
            return False
        if made:
            log.info("made region %r for pool %s/%s", pool.region, pool.namespace, pool.name)
        self.made.add(key)
        return True
