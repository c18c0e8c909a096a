"""DESCRIBE_REGION on secured hubs: refused to a caller with no identity, as every request
but AUTHENTICATE is; answered to any authenticated one (the hubs it names are where redirects
send every client anyway), with no ACL rule needed. DESCRIBE_LINKS needs describe or admin on
the cluster."""

from __future__ import annotations

import pytest

from hedwig.errors import AuthenticationError, ForbiddenError
from hedwig.protocol import DescribeRegion, Links, Region
from tests.security.conftest import SecureRegion


async def test_the_region_is_told_only_to_an_authenticated_caller(secure: SecureRegion) -> None:
    async with secure.client(security=secure.security()) as anonymous:
        conn = await anonymous.router.connection(secure.addresses[0])
        with pytest.raises(AuthenticationError):
            await conn.request(DescribeRegion(request_id=conn.next_id()))
        assert anonymous.router.region_hubs == []
    async with secure.client(security=secure.security(cert="alice")) as alice:
        conn = await alice.router.connection(secure.addresses[0])
        answer = await conn.request(DescribeRegion(request_id=conn.next_id()))
        assert isinstance(answer, Region)
        assert sorted(answer.hubs) == sorted(secure.addresses)


async def test_links_are_told_to_who_may_describe_the_cluster(secure: SecureRegion) -> None:
    """DESCRIBE_LINKS names other regions' endpoints and the replication from them: refused
    to an identity without describe (or admin) on the cluster, answered to one with it."""
    async with secure.client(security=secure.security(cert="alice")) as alice:
        with pytest.raises(ForbiddenError, match="on the cluster"):
            await alice.describe_links(secure.addresses[0])
    async with secure.client(security=secure.security(token_for="admin")) as admin:
        links = await admin.describe_links(secure.addresses[0])
        assert isinstance(links, Links) and links.regions == ()
