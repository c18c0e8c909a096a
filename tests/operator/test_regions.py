"""A secured pool's ZooKeeper region is made by the operator's admin digest before its hubs.

``/hedwig`` is closed to creation by anyone but the admin digest (``tests/security/
test_closed_root.py`` shows it on a real ZooKeeper), so the operator makes each secured
pool's region node, with the pool's own digest, before the pool's StatefulSet; without an
admin digest, on etcd, or unsecured, it makes none; a ZooKeeper it cannot reach is tried
again at the next reconciliation, and a region made is not made again.
"""

from __future__ import annotations

import base64
from pathlib import Path

from hedwig_operator.pools import apply_children
from hedwig_operator.regions import ADMIN_DIGEST_FILE_ENV, PoolRegions
from hedwig_operator.security import PoolTrust
from hedwig_operator.specs import parse_pool

from .fakes import FakeRegions, World, pool_body

ADMIN = "hedwig-admin:adm1n"
SECURE = {"region": "r1", "security": {"enabled": True}}


def with_admin(w: World, admin: str | None = ADMIN) -> FakeRegions:
    fake = FakeRegions(w.kube)
    w.trust.regions = PoolRegions(admin_digest=admin, maker=fake.make)
    return fake


def pool_digest(w: World) -> str:
    body = w.kube.objects[("Secret", "ns", "pool-zookeeper")]
    return base64.b64decode(body["data"]["digest"]).decode()


async def test_a_secured_pools_region_is_made_with_its_digest_before_its_hubs() -> None:
    w = await World().start()
    zk = with_admin(w)
    known_then: list[dict[tuple[str, str], str]] = []
    make = zk.make

    async def noting(url: str, region: str, admin: str, digest: str) -> bool:
        known_then.append(dict(w.trust.digests))
        return await make(url, region, admin, digest)

    w.trust.regions.maker = noting
    pool = parse_pool(pool_body(spec=SECURE))
    await apply_children(w.kube, pool, w.trust)
    assert zk.calls == [("zk:2181", "r1", ADMIN)]
    # Before the operator's own stores could open the region with the pool's digest (one
    # opened first, on an ensemble without /hedwig, would make /hedwig the pool's).
    assert known_then == [{}] and ("zk:2181", "r1") in w.trust.digests
    assert zk.regions == {"r1": pool_digest(w)}
    # Made before the hubs: the pool's digest Secret existed, its StatefulSet did not yet.
    assert "Secret" in zk.kinds_then["r1"] and "StatefulSet" not in zk.kinds_then["r1"]
    assert ("StatefulSet", "ns", "pool") in w.kube.objects
    await apply_children(w.kube, pool, w.trust)  # the next reconciliation: made already
    assert len(zk.calls) == 1


async def test_no_region_is_made_without_an_admin_digest_on_etcd_or_unsecured() -> None:
    for spec, admin in (
        (SECURE, None),
        ({**SECURE, "metadata": {"url": "etcd://etcd:2379"}}, ADMIN),
        ({"region": "r1"}, ADMIN),
    ):
        w = await World().start()
        zk = with_admin(w, admin)
        await apply_children(w.kube, parse_pool(pool_body(spec=spec)), w.trust)
        assert zk.calls == [] and zk.regions == {}, spec
        assert ("StatefulSet", "ns", "pool") in w.kube.objects


async def test_a_zookeeper_down_is_tried_again_at_the_next_reconciliation() -> None:
    w = await World().start()
    zk = with_admin(w)
    zk.down = True
    pool = parse_pool(pool_body(spec=SECURE))
    await apply_children(w.kube, pool, w.trust)  # logged, the children applied all the same
    assert zk.regions == {} and ("StatefulSet", "ns", "pool") in w.kube.objects
    zk.down = False
    await apply_children(w.kube, pool, w.trust)
    assert zk.regions == {"r1": pool_digest(w)} and len(zk.calls) == 2


def test_the_admin_digest_comes_from_its_mounted_file(tmp_path: Path) -> None:
    path = tmp_path / "digest"
    path.write_text(ADMIN + "\n")
    trust = PoolTrust.from_pod({ADMIN_DIGEST_FILE_ENV: str(path), "HEDWIG_TOKEN_FILE": "/none"})
    assert trust.regions.admin_digest == ADMIN
    assert PoolTrust.from_pod({"HEDWIG_TOKEN_FILE": "/none"}).regions.admin_digest is None
