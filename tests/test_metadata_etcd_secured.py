"""The etcd store against etcd secured as in production: TLS with client certificates,
authentication on, and Hedwig's user confined to Hedwig's prefix by its role.

The conformance suite passes through all of it (every operation the store makes is one that
role allows), what must be refused is refused at once with a clear error (a wrong password, no
credentials, keys outside the prefix, no client certificate, a server of another CA), and a
restarted etcd, which has forgotten every token it gave, costs the client one new token.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from hedwig.devcluster.cluster import DevCluster
from hedwig.devcluster.etcd import EtcdServer
from hedwig.devcluster.security import DevSecurity
from hedwig.devcluster.zookeeper import free_port
from hedwig.errors import MetadataError, MetadataUnavailableError
from hedwig.metadata import HubInfo, HubLoad, MetadataStore, SessionState, open_store
from hedwig.metadata.etcd import EtcdCredentials, EtcdMetadataStore
from hedwig.metadata.records import NEW_VERSION
from hedwig.security import ClientSecurity
from hedwig.security.ca import CertificateAuthority
from tests.bundle_conformance import BundleConformance
from tests.cluster_helpers import hedwig
from tests.failure.lab.relay import start_relay
from tests.metadata_conformance import MetadataConformance
from tests.namespace_conformance import NamespaceConformance
from tests.secured_etcd import access_files, change_password, secured_etcd
from tests.waiting import succeeds

pytestmark = pytest.mark.integration


def _store(
    security: DevSecurity, server: EtcdServer, region: str, **changes: object
) -> EtcdMetadataStore:
    env = security.store_env()
    user, _, password = security.etcd_credentials.partition(":")
    given: dict[str, object] = {
        "session_timeout": 2.0,
        "username": user,
        "password": password,
        "ca": Path(env["HEDWIG_ETCD_CA"]).read_bytes(),
        "cert": Path(env["HEDWIG_ETCD_CERT"]).read_bytes(),
        "key": Path(env["HEDWIG_ETCD_KEY"]).read_bytes(),
    }
    given.update(changes)
    address = str(given.pop("address", server.address))
    credentials = EtcdCredentials(
        **{name: given.pop(name) for name in ("username", "password", "ca", "cert", "key")}  # type: ignore[arg-type]
    )
    return EtcdMetadataStore(address, region, credentials=credentials, **given)  # type: ignore[arg-type]


async def _started(
    secured_etcd_server: tuple[DevSecurity, EtcdServer], region: str
) -> AsyncIterator[MetadataStore]:
    async with _store(*secured_etcd_server, region) as s:
        yield s


# Two stores of one region: a hub's and another's.
store = pytest.fixture(_started, name="store")
other = pytest.fixture(_started, name="other")


class TestSecuredEtcdStore(MetadataConformance, BundleConformance, NamespaceConformance):
    async def expire(self, store: MetadataStore) -> None:
        assert isinstance(store, EtcdMetadataStore)
        await store.etcd.revoke_elsewhere(store.etcd.lease)


async def test_the_store_is_configured_from_the_environment_as_hubs_are(
    secured_etcd_server: tuple[DevSecurity, EtcdServer],
    region: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    security, server = secured_etcd_server
    for name, value in security.store_env().items():
        monkeypatch.setenv(name, value)
    async with open_store(server.url, region=region) as s:
        await s.topics.ensure_topic("from-env")
        assert await s.topics.list_topics() == ["from-env"]


async def test_what_must_be_refused_is_refused_at_once(
    secured_etcd_server: tuple[DevSecurity, EtcdServer], region: str
) -> None:
    security, server = secured_etcd_server
    loop = asyncio.get_running_loop()

    async def attempt(s: EtcdMetadataStore) -> MetadataError:
        try:
            await s.start()
        except MetadataError as exc:
            return exc
        try:
            await s.topics.ensure_topic("t")
        except MetadataError as exc:
            return exc
        finally:
            await s.close()
        raise AssertionError("not refused")

    async def refused(s: EtcdMetadataStore) -> MetadataError:
        began = loop.time()
        error = await attempt(s)
        assert not isinstance(error, MetadataUnavailableError), error
        assert loop.time() - began < 5.0, "a refusal must not be retried"
        return error

    wrong = await refused(_store(security, server, region, password="wrong"))
    assert "refused user 'hedwig'" in str(wrong) and "credentials" in str(wrong)
    anonymous = await refused(_store(security, server, region, username=None, password=None))
    assert "user name is empty" in str(anonymous) or "permission denied" in str(anonymous)
    # Hedwig's user may not write outside Hedwig's prefix (another tenant's keys).
    outside = await refused(_store(security, server, region, prefix="/elsewhere"))
    assert "permission denied" in str(outside)


async def test_no_client_certificate_or_another_ca_gets_no_connection(
    secured_etcd_server: tuple[DevSecurity, EtcdServer], region: str, tmp_path: Path
) -> None:
    security, server = secured_etcd_server
    for changes in (
        {"cert": None, "key": None},
        {"ca": CertificateAuthority.create("not etcd's", days=1).cert_pem},
    ):
        s = _store(security, server, region, **changes)
        with pytest.raises(MetadataUnavailableError):
            await s.etcd.start(timeout=1.0)


async def test_a_restarted_etcd_costs_one_new_token(tmp_path: Path) -> None:
    """etcd keeps its tokens in memory: after a restart every call with the old one is refused
    as invalid. The client authenticates again (once for all its waiting calls) and goes on;
    its watches fire so their holders read again."""
    security, server = secured_etcd(str(tmp_path))
    try:
        s = _store(security, server, "restarts", session_timeout=10.0)
        await s.start()
        try:
            await s.topics.ensure_topic("t")
            await s.hubs.register_hub("127.0.0.1:7", HubLoad())
            version = await s.ownership.write_owner_info(
                "t", HubInfo("127.0.0.1:7", 1), NEW_VERSION
            )
            fired = asyncio.Event()
            s.ownership.watch_owner("t", lambda _t: fired.set(), version)
            token = s.etcd.connection.token
            await asyncio.get_running_loop().run_in_executor(None, server.restart)
            # the channel reconnects first (unavailable meanwhile)
            await succeeds(lambda: s.topics.ensure_topic("after-0"), MetadataUnavailableError, 10)
            await asyncio.gather(*(s.topics.ensure_topic(f"after-{i}") for i in range(20)))
            assert s.etcd.connection.token != token, "the client kept a token etcd has forgotten"
            assert len(await s.topics.list_topics()) == 21
            await asyncio.wait_for(fired.wait(), 10)
        finally:
            await s.close()
    finally:
        server.stop()


async def test_a_secured_region_on_etcd(tmp_path: Path) -> None:
    """Hubs with TLS, authentication and ACLs on their listeners, on etcd with TLS and its
    own authentication: publishing and subscribing as the super-user, and ``hedwig topics``
    with the environment ``dev up --secure`` prints."""
    with DevCluster(
        hubs=1,
        region="secured-etcd",
        replication="1/1/1",
        base_dir=str(tmp_path / "cluster"),
        store="etcd",
        secure=True,
    ) as cluster:
        assert cluster.security is not None
        env = cluster.security.client_env()
        security = ClientSecurity.build(
            tls_ca=env["HEDWIG_TLS_CA"], cert=env["HEDWIG_CERT"], key=env["HEDWIG_KEY"]
        )
        from hedwig.client import HedwigClient

        async with HedwigClient(cluster.addresses, security=security) as client:
            sub = await client.subscribe("on-secured-etcd", "s")
            for i in range(3):
                await client.publish("on-secured-etcd", b"%d" % i)
            got = [await sub.next(5) for _ in range(3)]
            assert [m.value for m in got] == [b"0", b"1", b"2"]
        args = ("topics", "--zk", cluster.zk, "--region", cluster.region, "--json")
        listed = await asyncio.get_running_loop().run_in_executor(
            None, lambda: hedwig(*args, env={**os.environ, **env})
        )
        assert listed.returncode == 0, listed.stderr
        assert "on-secured-etcd" in listed.stdout
        # Without the etcd user: refused at once, saying so.
        anonymous = {**os.environ, **env}
        del anonymous["HEDWIG_ETCD_CREDENTIALS"]
        refused = await asyncio.get_running_loop().run_in_executor(
            None, lambda: hedwig(*args, env=anonymous, timeout=20)
        )
        assert refused.returncode != 0
        assert "etcd" in refused.stderr, refused.stderr


async def test_a_password_rotated_in_its_file_is_picked_up_without_a_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Credentials from a file (a mounted Secret: ``HEDWIG_ETCD_DIR``) are read again when
    etcd refuses the token: changing a user's password makes etcd refuse the tokens issued
    before. Changed in etcd before the file: calls fail as retriable meanwhile, not as a
    refusal; once the file has it, they go on."""
    security, server = secured_etcd(str(tmp_path))
    try:
        mounted = tmp_path / "etcd-access"
        mounted.mkdir()
        for name, value in access_files(security).items():
            (mounted / name).write_bytes(value)
        monkeypatch.setenv("HEDWIG_ETCD_DIR", str(mounted))
        async with open_store(server.url, region="rotation", session_timeout_s=10.0) as s:
            assert isinstance(s, EtcdMetadataStore)
            await s.topics.ensure_topic("before")
            await change_password(server, security, "hedwig", "rotated-1")
            (mounted / "credentials").write_text("hedwig:rotated-1")
            await s.topics.ensure_topic("after-the-file")  # a new token, the new password

            await change_password(server, security, "hedwig", "rotated-2")
            with pytest.raises(MetadataUnavailableError, match="waiting for its new"):
                await s.topics.ensure_topic("meanwhile")
            (mounted / "credentials").write_text("hedwig:rotated-2\n")
            await s.topics.ensure_topic("once-the-file-has-it")
            assert await s.topics.list_topics() == sorted(
                ["before", "after-the-file", "once-the-file-has-it"]
            )
    finally:
        server.stop()


async def test_a_session_on_a_slow_link_ends_by_its_clock_before_etcd_lets_its_lease_go(
    tmp_path: Path,
) -> None:
    """A link to the secured etcd that delays each packet 1 s each way (the failure suite's
    relay, on loopback), then drops everything (the relay frozen). etcd renews a lease when a
    refresh reaches it, a second after it was sent, and expires it a TTL after the last one
    that did; the session must be over by this process's clock no later, or a hub would serve
    on while another claims its topics. Counted from each refresh's answer, as it was, the
    session ended 0.6 s after etcd had let the lease go; counted from the sending, 3.2 s
    before (the refresh under way when the link froze reached etcd, its answer did not). And
    the session must last on such a link, though TLS and the token cost round trips of their
    own before the first lease: its grant once counted from before the connection was made,
    and it was lost at its first refresh. (The relay listens on 127.0.0.1, the server's
    address, so the server's certificate is checked through it as ever; the network lab runs
    a slower link, without security: ``test_owner_link_to_etcd_slowed_past_its_lease``.)"""
    security, server = secured_etcd(str(tmp_path))

    try:
        port = free_port()
        relay = start_relay(f"127.0.0.1:{port}", server.address, 1.0)
        slow = _store(security, server, "slow", session_timeout=5.0, address=f"127.0.0.1:{port}")
        direct = _store(security, server, "slow", session_timeout=5.0)
        loop = asyncio.get_running_loop()
        lost: list[float] = []
        try:
            await slow.start()
            await direct.start()
            slow.session.add_listener(
                lambda s: lost.append(loop.time()) if s is SessionState.LOST else None
            )
            # An owner record, on a lease the session refreshes with its own.
            await slow.topics.ensure_topic("slow-link")
            await slow.ownership.write_owner_info(
                "slow-link", HubInfo("127.0.0.1:9", 1), NEW_VERSION
            )
            await asyncio.sleep(2 * slow.etcd.ttl)  # refreshed over the slow link all along
            assert slow.session.state is SessionState.CONNECTED
            assert not lost, "the session was lost on a link slow by a fifth of its TTL"
            os.kill(relay.pid, signal.SIGSTOP)
            gone: float | None = None
            for _ in range(400):
                if gone is None and await direct.ownership.read_owner_info("slow-link") is None:
                    gone = loop.time()
                if gone is not None and lost:
                    break
                await asyncio.sleep(0.05)
            assert lost, "the session outlived its lease by its own clock"
            assert gone is not None, "etcd kept the owner record"
            assert lost[0] <= gone, f"the session ended {lost[0] - gone:.2f} s after etcd's lease"
        finally:
            relay.kill()
            relay.wait()
            await slow.close()
            await direct.close()
    finally:
        server.stop()
